"""The fault model: a leases table that behaves as DynamoDB does, not as a dictionary does.

:class:`RecordingStore` is the shared table (the in-memory store with DynamoDB's conditions) that also
keeps its history: every committed change with its simulated time, the versions an eventually
consistent Scan may return, and the facts the checker needs (checkpoints per shard in commit order,
shards that reached SHARD_END, leases created).

:class:`FaultyStore` is one worker's connection to it. Under :class:`Faults` every call

- takes time (a seeded distribution with a long tail; the write commits somewhere inside it, the
  answer comes at its end — and later still if the process is paused meanwhile). Most of a slow
  call's tail falls *before* the commit — the server queueing it, botocore's own throttle retries —
  so a slow write usually lands late and is answered just after;
- may find its process stopped just before it is sent (a stop-the-world pause: GC, CPU starvation,
  SIGSTOP), holding every thread of that process, between any two calls;
- may be throttled (refused without effect);
- if a write, may commit and still fail: answered 500 so that botocore retries it (the retry then
  meets its own write and usually fails its condition) or answered with a timeout;
- if a Scan, may return a view of the table up to ``stale_scan_millis`` old.

Random draws rarely line up the one unlucky moment a particular defence exists for, so a history
can also carry directed faults (:mod:`simulation.directed`): "the first scan of w2 after 20 s
sees the table as it was 10 s earlier", "w1 stops right after its listing comes back"
(tests/simulation/test_directed.py, test_directed_delivery.py).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from consumer.leases.errors import (
    LeaseError,
    LeaseStoreThrottledError,
    LeaseStoreUnavailableError,
)
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot
from simulation.directed import Directed, Script
from simulation.kernel import Kernel

T = TypeVar("T")


@dataclass
class Faults:
    """What the table does wrong, and how often (0 disables each)."""

    latency_millis: int = 0  # median-ish call time
    tail_probability: float = 0.0  # share of calls that are many times slower
    tail_millis: int = 0  # how slow a slow call is, at most
    throttle_rate: float = 0.0
    ambiguous_rate: float = 0.0  # a write commits, then fails (retried 500 or timeout)
    stale_scan_millis: int = 0
    pause_rate: float = 0.0  # share of calls before which the whole process stops (pause_millis long)
    active: bool = True

    @classmethod
    def real_world(cls, rng: random.Random, failover_millis: int) -> Faults:
        """A seeded mix at the rates an unlucky hour of DynamoDB shows, scaled to the failover time."""
        return cls(
            latency_millis=rng.randint(2, 40),
            tail_probability=rng.choice((0.01, 0.03, 0.08)),
            # Up to the leases client's own bound: its timeouts and retries end within one failover.
            tail_millis=rng.randint(failover_millis // 10, failover_millis),
            throttle_rate=rng.choice((0.0, 0.05, 0.15)),
            ambiguous_rate=rng.choice((0.0, 0.05, 0.15)),
            stale_scan_millis=rng.choice((0, failover_millis // 4, failover_millis)),
            pause_rate=rng.choice((0.0, 0.002, 0.01)),
        )


def pause_millis(rng: random.Random, failover_millis: int) -> int:
    """How long a process stays stopped: mostly a GC pause or a short SIGSTOP (0.2-2.5 x failover),
    sometimes a suspended VM or a stopped process that comes back long after its leases were taken
    (2.5-8 x failover)."""
    factor = rng.uniform(0.2, 2.5) if rng.random() < 0.8 else rng.uniform(2.5, 8.0)
    return int(factor * failover_millis)


@dataclass
class History:
    """What the table saw, for the checker."""

    checkpoints: dict[str, list[tuple[int, ExtendedSequenceNumber]]] = field(default_factory=dict)
    finished_at: dict[str, int] = field(default_factory=dict)
    created: list[tuple[int, str]] = field(default_factory=list)
    fenced_takes: list[tuple[int, str, str]] = field(default_factory=list)  # (time, worker, shard)
    owners: dict[str, list[tuple[int, str | None]]] = field(default_factory=dict)  # shard -> owner changes


class RecordingStore(InMemoryLeaseStore):
    """The shared table, with its history and its past versions (for stale scans)."""

    def __init__(self, kernel: Kernel) -> None:
        super().__init__()
        self.kernel = kernel
        self.history = History()
        self._versions: list[tuple[int, Snapshot]] = []
        self._times: list[int] = []
        self._remember()

    def _remember(self) -> None:
        now = self.kernel.now
        snapshot = super().scan()
        if self._times and self._times[-1] == now:
            self._versions[-1] = (now, snapshot)
        else:
            self._versions.append((now, snapshot))
            self._times.append(now)
        for shard_id, lease in snapshot.leases.items():
            marks = self.history.checkpoints.setdefault(shard_id, [])
            if not marks or marks[-1][1] != lease.checkpoint:
                marks.append((now, lease.checkpoint))
            if lease.finished:
                self.history.finished_at.setdefault(shard_id, now)
            owners = self.history.owners.setdefault(shard_id, [])
            if not owners or owners[-1][1] != lease.owner:
                owners.append((now, lease.owner))

    def view_at(self, at: int) -> Snapshot:
        """The table as it was at simulated time ``at`` (the newest version not after it)."""
        index = max(0, bisect.bisect_right(self._times, at) - 1)
        return self._versions[index][1]

    def _mutating(self, call: Callable[[], T]) -> T:
        try:
            return call()
        finally:
            self._remember()

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
        created = self._mutating(lambda: super(RecordingStore, self).create_if_absent(lease, generation))
        if created:
            self.history.created.append((self.kernel.now, lease.shard_id))
        return created

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Sequence[str] = ()
    ) -> tuple[HandOverRequest, ...]:
        return self._mutating(lambda: super(RecordingStore, self).heartbeat(beat, expected_counter, clear))

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        self._mutating(lambda: super(RecordingStore, self).delete_heartbeat(beat))

    def take(self, seen: Lease, new_owner: str) -> Lease:
        return self._mutating(lambda: super(RecordingStore, self).take(seen, new_owner))

    def ask_hand_over(self, owner: str, request: HandOverRequest) -> None:
        self._mutating(lambda: super(RecordingStore, self).ask_hand_over(owner, request))

    def request_steal(self, seen: Lease, thief: str, now_wall_millis: int) -> Lease:
        return self._mutating(lambda: super(RecordingStore, self).request_steal(seen, thief, now_wall_millis))

    def release(self, held: Lease, to: str | None = None) -> Lease:
        return self._mutating(lambda: super(RecordingStore, self).release(held, to))

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
        return self._mutating(lambda: super(RecordingStore, self).checkpoint(held, checkpoint))

    def delete_finished(self, lease: Lease) -> None:
        self._mutating(lambda: super(RecordingStore, self).delete_finished(lease))

    def claim_first_start(self, worker_id: str, at_wall_millis: int) -> bool:
        return self._mutating(
            lambda: super(RecordingStore, self).claim_first_start(worker_id, at_wall_millis)
        )


class FaultyStore:
    """One worker's view of the shared table, through the fault model."""

    def __init__(
        self,
        table: RecordingStore,
        kernel: Kernel,
        faults: Faults,
        rng: random.Random,
        failover_millis: int,
    ) -> None:
        self.table, self.kernel, self.faults, self.rng = table, kernel, faults, rng
        self.failover_millis = failover_millis
        self.fenced: Callable[[], bool] = lambda: False  # the worker's own view, set by the world
        self.name = ""  # set by the world
        self.script: Script | None = None
        self.injected: dict[str, int] = {
            "throttled": 0,
            "retried_after_commit": 0,
            "timed_out_after_commit": 0,
        }

    def _latency(self) -> tuple[int, int]:
        f = self.faults
        if not f.active:
            return 0, 0
        base = int(self.rng.expovariate(1 / f.latency_millis)) if f.latency_millis else 0
        before = self.rng.randint(0, base) if base else 0
        after = base - before
        if f.tail_millis and self.rng.random() < f.tail_probability:
            tail = self.rng.randint(f.tail_millis // 4, f.tail_millis)
            if self.rng.random() < 0.75:
                before += tail  # queued on the server or retried by botocore: it commits late
            else:
                after += tail  # the answer is slow to come back
        return before, after

    def _maybe_stop(self) -> None:
        """A stop-the-world pause of this whole process, just before a call goes out."""
        f = self.faults
        if f.active and f.pause_rate and self.rng.random() < f.pause_rate:
            group = self.kernel.current.group
            stop = pause_millis(self.rng, self.failover_millis)
            group.paused_until = max(group.paused_until, self.kernel.now + stop)
            self.kernel.sleep(0)  # held (with every other thread of the process) until it resumes

    def directed(self, call: str, shard: str = "") -> Directed | None:
        if self.script is None:
            return None
        return self.script.take(self.name, self.kernel.current.name, call, self.kernel.now, shard)

    def stop_before_send(self, fault: Directed | None) -> None:
        """The process stops just before the request of a call hit by ``fault`` goes out."""
        if fault is not None and fault.pause_before_send_millis:
            group = self.kernel.current.group
            group.paused_until = max(group.paused_until, self.kernel.now + fault.pause_before_send_millis)
            self.kernel.sleep(0)

    def answered(self, fault: Directed | None) -> None:
        """The answer of a call hit by ``fault`` arrives late, or the process stops on receiving it."""
        if fault is None:
            return
        self.kernel.sleep(fault.answer_delay_millis)
        if fault.pause_after_millis:
            group = self.kernel.current.group
            group.paused_until = max(group.paused_until, self.kernel.now + fault.pause_after_millis)
            self.kernel.sleep(0)

    def _call(
        self,
        name: str,
        call: Callable[[], T],
        *,
        write: bool,
        fault: Directed | None = None,
        asked: bool = False,
    ) -> T:
        # The request is on its way: the server acts on it after ``before`` even if this process is
        # paused meanwhile; only the answer waits for the process to run again.
        self._maybe_stop()
        fault = fault if asked else self.directed(name)  # asked: the caller looked its fault up
        self.stop_before_send(fault)
        before, after = self._latency()
        if fault is not None:
            before += fault.commit_delay_millis
            if fault.pause_after_send_millis:
                group = self.kernel.current.group
                group.paused_until = max(group.paused_until, self.kernel.now + fault.pause_after_send_millis)
        self.kernel.sleep(before, through_pause=True)
        if fault is not None and fault.throttle:
            self.kernel.sleep(after)
            if fault.answer_delay_millis or fault.pause_after_millis:
                self.answered(fault)
            raise LeaseStoreThrottledError(f"{name}: throttled (directed fault)")
        if self.faults.active and self.rng.random() < self.faults.throttle_rate:
            self.injected["throttled"] += 1
            self.kernel.sleep(after)
            raise LeaseStoreThrottledError(f"{name}: throttled (fault model)")
        result, error = _attempt(call)
        self.kernel.sleep(after)
        self.answered(fault)
        if write and error is None and self.faults.active and self.rng.random() < self.faults.ambiguous_rate:
            if self.rng.random() < 0.5:
                # Answered 500 after the commit; botocore sends the same request again.
                self.injected["retried_after_commit"] += 1
                self.kernel.sleep(self._latency()[0])
                result, error = _attempt(call)
            else:
                self.injected["timed_out_after_commit"] += 1
                raise LeaseStoreUnavailableError(f"{name}: read timed out (the write had committed)")
        if error is not None:
            raise error
        return result  # type: ignore[return-value]

    # ------------------------------------------------------------------------- the port

    def scan(self) -> Snapshot:
        fault = self.directed("scan")

        def read() -> Snapshot:
            age = 0
            if self.faults.active and self.faults.stale_scan_millis:
                age = self.rng.randint(0, self.faults.stale_scan_millis)
            if fault is not None and fault.view_age_millis:
                age = min(fault.view_age_millis, self.failover_millis)  # the model's bound
            return self.table.view_at(self.kernel.now - age)

        return self._call("scan", read, write=False, fault=fault, asked=True)

    def scan_workers(self) -> Snapshot:
        def read() -> Snapshot:
            age = 0
            if self.faults.active and self.faults.stale_scan_millis:
                age = self.rng.randint(0, self.faults.stale_scan_millis)
            view = self.table.view_at(self.kernel.now - age)
            return Snapshot({}, view.heartbeats, (), view.first_start_claimed)

        return self._call("scan_workers", read, write=False)

    def get(self, shard_id: str) -> Lease | None:
        return self._call("get", lambda: self.table.get(shard_id), write=False)

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        return self._call("get_heartbeat", lambda: self.table.get_heartbeat(worker_id), write=False)

    def lineage_generation(self) -> int:
        return self._call("lineage_generation", self.table.lineage_generation, write=False)

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
        return self._call("create", lambda: self.table.create_if_absent(lease, generation), write=True)

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Sequence[str] = ()
    ) -> tuple[HandOverRequest, ...]:
        return self._call(
            "heartbeat", lambda: self.table.heartbeat(beat, expected_counter, clear), write=True
        )

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        self._call("delete_heartbeat", lambda: self.table.delete_heartbeat(beat), write=True)

    def take(self, seen: Lease, new_owner: str) -> Lease:
        if self.fenced():  # decided while fenced (a stop after this point is the fault model's)
            self.table.history.fenced_takes.append((self.kernel.now, new_owner, seen.shard_id))
        return self._call("take", lambda: self.table.take(seen, new_owner), write=True)

    def ask_hand_over(self, owner: str, request: HandOverRequest) -> None:
        self._call("ask_hand_over", lambda: self.table.ask_hand_over(owner, request), write=True)

    def request_steal(self, seen: Lease, thief: str, now_wall_millis: int) -> Lease:
        return self._call(
            "request_steal", lambda: self.table.request_steal(seen, thief, now_wall_millis), write=True
        )

    def release(self, held: Lease, to: str | None = None) -> Lease:
        return self._call("release", lambda: self.table.release(held, to), write=True)

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
        fault = self.directed("checkpoint", held.shard_id)
        return self._call(
            "checkpoint", lambda: self.table.checkpoint(held, checkpoint), write=True, fault=fault, asked=True
        )

    def delete_finished(self, lease: Lease) -> None:
        self._call("delete_finished", lambda: self.table.delete_finished(lease), write=True)

    def claim_first_start(self, worker_id: str, at_wall_millis: int) -> bool:
        return self._call(
            "claim_first_start", lambda: self.table.claim_first_start(worker_id, at_wall_millis), write=True
        )


def _attempt(call: Callable[[], T]) -> tuple[T | None, LeaseError | None]:
    try:
        return call(), None
    except LeaseError as exc:
        return None, exc

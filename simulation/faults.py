"""The fault model of the leases table, and one worker's leases port on it.

The product's own :class:`~consumer.leases.dynamodb.DynamoDBLeaseStore` is every simulated worker's
lease store: its conditional writes, ALL_OLD answers, ambiguous-write resolution, paged scans of both
tables, heartbeat rows, lineage generation and first-start claim all run, against a faulty model of
DynamoDB's low-level API (:mod:`simulation.dynamodb_api`, the client, configured as the leases
client is; :mod:`simulation.ddb_tables`, the tables behind it, which keep the history the checker
reads). :class:`Faults` says what goes wrong there and how often:

- every request takes time (a seeded distribution with a long tail; the server acts somewhere inside
  it, the answer comes at its end -- and later still if the process is paused meanwhile); a request
  its client has given up on (the read timeout) is never acted on after that;
- the process may stop just before a request goes out (a stop-the-world pause: GC, CPU starvation,
  SIGSTOP), holding every thread of that process;
- an attempt may be throttled, fail with a 500 or not connect -- botocore retries it, as the leases
  client's config says -- and for a few seconds at a time the whole table may throttle, fail or be
  out of reach (``storms``), long enough for the retries to run out;
- a write may commit and still fail: answered 500 (botocore sends it again, and the retry usually
  meets its own write and fails its condition) or not answered before the read timeout;
- a Scan (every page on its own) or an eventually consistent read may see the table as it was up to
  ``stale_scan_millis`` ago; a Scan's pages are small, so every scan pages.

:class:`FaultyStore` is the port a worker's coordinator holds: the store, plus what sits above the
client -- the directed faults of a history (:mod:`simulation.directed`: "the first scan of w2 after
20 s sees the table as it was 10 s earlier", "w1 stops right after its listing comes back") and the
record of takes a fenced worker decided. A directed ``throttle`` is the one fault that stays at the
port: a call refused at once, as if botocore's retries had all been throttled with no backoff
(botocore's backoff draws make that rare, and the directed histories script its timing).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.errors import LeaseStoreThrottledError
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot
from simulation.ddb_tables import MEGABYTE, History, Tables
from simulation.directed import Directed, Script
from simulation.dynamodb_api import FaultyDynamoDB
from simulation.kernel import Kernel

T = TypeVar("T")
STORMS = ("throttled", "failing", "unreachable")

__all__ = ["Faults", "FaultyStore", "History"]


@dataclass
class Faults:
    """What the table does wrong, and how often (0 disables each)."""

    latency_millis: int = 0  # median-ish time of one attempt
    tail_probability: float = 0.0  # share of attempts that are many times slower
    tail_millis: int = 0  # how slow a slow attempt is, at most
    throttle_rate: float = 0.0  # per attempt
    error_rate: float = 0.0  # per attempt: a 500 without effect (a quarter as many do not connect)
    ambiguous_rate: float = 0.0  # a write commits, then is answered 500 or not in time
    stale_scan_millis: int = 0
    pause_rate: float = 0.0  # share of requests before which the whole process stops
    storms_per_minute: float = 0.0  # stretches when every attempt fails one way (STORMS)
    storm_millis: int = 0  # how long a storm lasts, at most
    page_bytes: int = MEGABYTE  # a Scan page ends after this much data (DynamoDB: 1 MB)
    seed: int = 0  # the storms' draws
    active: bool = True
    _storms: list[tuple[int, int, str]] = field(default_factory=list, repr=False)

    @classmethod
    def real_world(cls, rng: random.Random, failover_millis: int) -> Faults:
        """A seeded mix at the rates an unlucky hour of DynamoDB shows, scaled to the failover time."""
        return cls(
            latency_millis=rng.randint(2, 40),
            tail_probability=rng.choice((0.01, 0.03, 0.08)),
            tail_millis=rng.randint(failover_millis // 10, failover_millis),
            throttle_rate=rng.choice((0.0, 0.05, 0.15)),
            error_rate=rng.choice((0.0, 0.02, 0.05)),
            ambiguous_rate=rng.choice((0.0, 0.05, 0.15)),
            stale_scan_millis=rng.choice((0, failover_millis // 4, failover_millis)),
            pause_rate=rng.choice((0.0, 0.002, 0.01)),
            storms_per_minute=rng.choice((0.0, 1.0, 3.0)),
            storm_millis=rng.randint(failover_millis // 10, failover_millis // 2),
            page_bytes=rng.choice((MEGABYTE, 1_500, 600)),
            seed=rng.getrandbits(32),
        )

    def storm(self, now: int) -> str | None:
        """The storm the table is in at ``now`` (None: none). The schedule is drawn from ``seed``
        as time reaches it, the same for every worker."""
        if not self.storms_per_minute or not self.storm_millis:
            return None
        if not self._storms:
            self._storms.append((now, now, ""))
        while self._storms[-1][1] <= now:
            rng = random.Random(f"{self.seed}-{len(self._storms)}")
            start = self._storms[-1][1] + int(rng.expovariate(self.storms_per_minute / 60_000))
            self._storms.append(
                (start, start + rng.randint(self.storm_millis // 4, self.storm_millis), rng.choice(STORMS))
            )
        for start, end, kind in reversed(self._storms):
            if start <= now < end:
                return kind
            if end <= now:
                return None
        return None


class FaultyStore:
    """One worker's leases port: the product's DynamoDB store on its faulty client, with the
    history's directed faults applied around each call."""

    def __init__(
        self, store: DynamoDBLeaseStore, client: FaultyDynamoDB, table: Tables, kernel: Kernel
    ) -> None:
        self.store, self.client, self.table, self.kernel = store, client, table, kernel
        self.fenced: Callable[[], bool] = lambda: False  # the worker's own view, set by the world
        self.name = ""  # set by the world
        self.script: Script | None = None

    @property
    def injected(self) -> dict[str, int]:
        return self.client.injected

    def directed(self, call: str, shard: str = "") -> Directed | None:
        if self.script is None:
            return None
        return self.script.take(self.name, self.kernel.current.name, call, self.kernel.now, shard)

    def _stop(self, millis: int) -> None:
        group = self.kernel.current.group
        group.paused_until = max(group.paused_until, self.kernel.now + millis)
        self.kernel.sleep(0)  # held (with every other thread of the process) until it resumes

    def stop_before_send(self, fault: Directed | None) -> None:
        """The process stops just before the request of a call hit by ``fault`` goes out."""
        if fault is not None and fault.pause_before_send_millis:
            self._stop(fault.pause_before_send_millis)

    def answered(self, fault: Directed | None) -> None:
        """The answer of a call hit by ``fault`` reaches its thread late (the thread waits; the
        rest of the process runs), or the process stops on receiving it."""
        if fault is None:
            return
        self.kernel.sleep(fault.answer_delay_millis)
        if fault.pause_after_millis:
            self._stop(fault.pause_after_millis)

    def _call(
        self, name: str, call: Callable[[], T], fault: Directed | None = None, *, asked: bool = False
    ) -> T:
        fault = fault if asked else self.directed(name)  # asked: the caller looked its fault up
        self.stop_before_send(fault)
        if fault is not None and fault.throttle:
            if fault.pause_after_send_millis:  # the request went out; the refusal waits for the process
                group = self.kernel.current.group
                group.paused_until = max(group.paused_until, self.kernel.now + fault.pause_after_send_millis)
            self.kernel.sleep(0)
            self.answered(fault)
            raise LeaseStoreThrottledError(f"{name}: throttled (directed fault)")
        self.client.begin(fault)
        try:
            result = call()
        except Exception:
            self.client.begin(None)
            self.answered(fault)
            raise
        self.client.begin(None)
        self.answered(fault)
        return result

    # ------------------------------------------------------------------------- the port

    def scan(self) -> Snapshot:
        return self._call("scan", self.store.scan)

    def scan_workers(self) -> Snapshot:
        return self._call("scan_workers", self.store.scan_workers)

    def get(self, shard_id: str) -> Lease | None:
        return self._call("get", lambda: self.store.get(shard_id))

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        return self._call("get_heartbeat", lambda: self.store.get_heartbeat(worker_id))

    def lineage_generation(self) -> int:
        return self._call("lineage_generation", self.store.lineage_generation)

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
        return self._call("create", lambda: self.store.create_if_absent(lease, generation))

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Sequence[str] = ()
    ) -> tuple[HandOverRequest, ...]:
        return self._call("heartbeat", lambda: self.store.heartbeat(beat, expected_counter, clear))

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        self._call("delete_heartbeat", lambda: self.store.delete_heartbeat(beat))

    def take(self, seen: Lease, new_owner: str) -> Lease:
        if self.fenced():  # decided while fenced (a stop after this point is the fault model's)
            self.table.history.fenced_takes.append((self.kernel.now, new_owner, seen.shard_id))
        return self._call("take", lambda: self.store.take(seen, new_owner))

    def ask_hand_over(self, owner: str, request: HandOverRequest) -> None:
        self._call("ask_hand_over", lambda: self.store.ask_hand_over(owner, request))

    def request_steal(self, seen: Lease, thief: str, now_wall_millis: int) -> Lease:
        return self._call("request_steal", lambda: self.store.request_steal(seen, thief, now_wall_millis))

    def release(self, held: Lease, to: str | None = None) -> Lease:
        return self._call("release", lambda: self.store.release(held, to))

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
        fault = self.directed("checkpoint", held.shard_id)
        return self._call("checkpoint", lambda: self.store.checkpoint(held, checkpoint), fault, asked=True)

    def delete_finished(self, lease: Lease) -> None:
        self._call("delete_finished", lambda: self.store.delete_finished(lease))

    def claim_first_start(self, worker_id: str, at_wall_millis: int) -> bool:
        return self._call(
            "claim_first_start", lambda: self.store.claim_first_start(worker_id, at_wall_millis)
        )

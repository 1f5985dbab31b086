"""A deterministic fleet simulation: lease coordinators on one in-memory table and one fake clock.

Each simulated worker runs its heartbeat and taker rounds on their real intervals (no threads: the
harness calls them when due) and "processes" the shards it may process, one unit of work per tick,
checkpointing each unit and SHARD_END at the end. Workers can crash (stop forever, release nothing),
pause (stop for a while and come back, like a long GC or a frozen VM), join, or stop gracefully.
The harness logs who processed what at which tick, so tests can check the invariants afterwards.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.errors import LeaseError
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from ground.clock import FakeClock
from ground.settings import WorkerSettings

TICK = 100  # ms


class SkewedClock:
    """One host's view of the shared fake time: its own wall-clock offset, the same rate."""

    def __init__(self, base: FakeClock, skew_millis: int) -> None:
        self._base, self._skew = base, skew_millis

    def monotonic_millis(self) -> int:
        return self._base.monotonic_millis()

    def wall_millis(self) -> int:
        return self._base.wall_millis() + self._skew

    def sleep(self, millis: float) -> None:
        self._base.advance(int(millis))


@dataclass
class SimWorker:
    name: str
    coordinator: LeaseCoordinator
    next_heartbeat: int
    next_take: int
    paused_until: int = -1
    crashed: bool = False
    progress: dict[str, int] = field(default_factory=dict)


@dataclass
class Fleet:
    settings: WorkerSettings
    shard_lengths: dict[str, int]
    seed: int = 0
    base: FakeClock = field(default_factory=lambda: FakeClock(start_millis=1_000_000))
    store: InMemoryLeaseStore = field(default_factory=InMemoryLeaseStore)
    workers: dict[str, SimWorker] = field(default_factory=dict)
    log: list[tuple[int, str, str, int]] = field(default_factory=list)  # (time, shard, worker, unit)
    finished_at: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    @property
    def now(self) -> int:
        return self.base.monotonic_millis()

    def add_shards(self, parents: dict[str, tuple[str, ...]]) -> None:
        for shard, shard_parents in parents.items():
            self.store.create_if_absent(
                Lease(
                    shard,
                    None,
                    0,
                    ExtendedSequenceNumber("TRIM_HORIZON"),
                    parent_shard_ids=frozenset(shard_parents),
                )
            )

    def join(self, name: str) -> SimWorker:
        skew = self.rng.randint(
            -self.settings.max_clock_skew_millis // 2, self.settings.max_clock_skew_millis // 2
        )
        coordinator = LeaseCoordinator(
            self.store,
            name,
            self.settings,
            SkewedClock(self.base, skew),
            rng=random.Random(f"{self.seed}{name}"),
        )
        coordinator.heartbeat_once()
        worker = SimWorker(name, coordinator, self.now + self.settings.renewal_interval_millis, self.now)
        self.workers[name] = worker
        return worker

    def crash(self, name: str) -> None:
        self.workers[name].crashed = True

    def pause(self, name: str, millis: int) -> None:
        self.workers[name].paused_until = self.now + millis

    def stop_gracefully(self, name: str) -> None:
        worker = self.workers[name]
        worker.coordinator.stop_taking()
        for lease in worker.coordinator.held():
            self._checkpoint(worker, lease.shard_id)
            worker.coordinator.release(lease.shard_id)
        worker.coordinator.stop(release=True)
        worker.crashed = True

    def active(self) -> list[SimWorker]:
        return [w for w in self.workers.values() if not w.crashed and w.paused_until <= self.now]

    def _checkpoint(self, worker: SimWorker, shard: str) -> None:
        done = worker.progress.get(shard, 0)
        if done:
            try:
                worker.coordinator.checkpoint(shard, str(done * 10))
            except LeaseError:
                worker.progress.pop(shard, None)

    def tick(self) -> None:
        order = self.active()
        self.rng.shuffle(order)
        for worker in order:
            # The worker's three threads run in no fixed order (processing may well run first after a pause).
            steps = [self._heartbeat, self._take, self._process]
            self.rng.shuffle(steps)
            for step in steps:
                step(worker)
        self.base.advance(TICK)

    def _heartbeat(self, worker: SimWorker) -> None:
        if self.now >= worker.next_heartbeat:
            worker.coordinator.heartbeat_once()
            worker.next_heartbeat = self.now + self.settings.renewal_interval_millis

    def _take(self, worker: SimWorker) -> None:
        if self.now >= worker.next_take:
            worker.coordinator.take_round()
            worker.next_take = self.now + self.settings.taker_interval_millis

    def _process(self, worker: SimWorker) -> None:
        c = worker.coordinator
        for lease in list(c.held()):
            shard = lease.shard_id
            if not c.may_process(shard):
                continue
            if c.handoff_requested(shard):
                self._checkpoint(worker, shard)
                c.release(shard)
                worker.progress.pop(shard, None)
                continue
            if not all(c.is_shard_finished(p) for p in lease.parent_shard_ids):
                continue
            start = int(lease.checkpoint.sequence) // 10 if lease.checkpoint.sequence.isdigit() else 0
            done = max(worker.progress.get(shard, 0), start)
            done += 1
            self.log.append((self.now, shard, worker.name, done))
            worker.progress[shard] = done
            try:
                if done >= self.shard_lengths[shard]:
                    c.checkpoint(shard, "SHARD_END")
                    self.finished_at.setdefault(shard, self.now)
                    worker.progress.pop(shard, None)
                else:
                    c.checkpoint(shard, str(done * 10))
            except LeaseError:
                worker.progress.pop(shard, None)

    def run_until(self, condition, max_millis: int) -> bool:  # type: ignore[no-untyped-def]
        deadline = self.now + max_millis
        while self.now < deadline:
            if condition():
                return True
            self.tick()
        return bool(condition())

    def all_finished(self) -> bool:
        return all(lease.finished for lease in self.store.scan().leases.values())

    def held_counts(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for w in self.active():
            counts[w.name] = sum(
                1
                for lease in self.store.scan().leases.values()
                if lease.owner == w.name and not lease.finished
            )
        return dict(counts)

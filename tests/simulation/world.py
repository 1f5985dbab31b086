"""A fleet under the fault model: real lease coordinators and shard syncers on simulated threads.

Each simulated worker process is a :class:`~tests.simulation.kernel.Group` running four threads —
heartbeat, taker, shard sync and a processor — with the product's own :class:`LeaseCoordinator` and
:class:`ShardSyncer`, over a :class:`~tests.simulation.faults.FaultyStore` and a stream whose listing is
eventually consistent. The processor delivers one record ("unit") of a shard per tick when
``may_process`` allows it under the ownership (lease counter) it read, as the lifecycle's shard
consumers do, checkpoints it, and checkpoints SHARD_END after the last record of a closed
shard. A chaos thread pauses (SIGSTOP / suspend), kills and adds workers while the faults are on. Every
delivery is recorded with the lease counter it was made under and the owner the table named at that
moment, for :mod:`tests.simulation.checker`. A history may also carry directed faults
(:class:`~tests.simulation.faults.Directed`) and a lineage of its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.errors import LeaseError
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.streams.source import Shard
from ground.settings import WorkerSettings
from tests.simulation.faults import Directed, Faults, FaultyStore, RecordingStore, Script, pause_millis
from tests.simulation.kernel import Group, Kernel

TICK = 200  # ms between a processor's steps


@dataclass(frozen=True)
class ShardSpec:
    shard_id: str
    parent: str | None
    born: int
    closes: int
    length: int  # records written over the shard's life


@dataclass(frozen=True)
class Delivery:
    at: int
    shard_id: str
    worker: str
    counter: int  # the lease counter the worker held: one value per ownership
    unit: int
    table_owner: str | None = None  # whom the table named as the lease's owner at that moment


class SimClock:
    """One host's clocks on simulated time: monotonic (counting suspends, as the product's does) and a
    wall clock off by a fixed skew."""

    def __init__(self, kernel: Kernel, skew_millis: int) -> None:
        self._kernel, self._skew = kernel, skew_millis

    def monotonic_millis(self) -> int:
        return self._kernel.now

    def wall_millis(self) -> int:
        return self._kernel.now + self._skew

    def sleep(self, millis: float) -> None:
        self._kernel.sleep(millis)


def lineage(rng: random.Random, start: int, roots: int = 3, generations: int = 3) -> dict[str, ShardSpec]:
    """Roots that roll over (one child) or split (two children) ``generations`` times."""
    shards: dict[str, ShardSpec] = {}
    counter = 0

    def add(parent: str | None, born: int, depth: int) -> None:
        nonlocal counter
        counter += 1
        shard_id = f"shardId-{counter:04d}"
        life = rng.randint(8_000, 30_000)
        shards[shard_id] = ShardSpec(shard_id, parent, born, born + life, rng.randint(5, 40))
        if depth + 1 < generations:
            for _ in range(2 if rng.random() < 0.3 else 1):
                add(shard_id, born + life, depth + 1)

    for _ in range(roots):
        add(None, start, 0)
    return shards


@dataclass
class SimWorker:
    name: str
    group: Group
    coordinator: LeaseCoordinator
    store: FaultyStore
    syncer: ShardSyncer
    # shard -> its consumer: (the counter it is bound to, where it started, the last unit delivered)
    progress: dict[str, tuple[int, int, int]] = field(default_factory=dict)


class World:
    def __init__(
        self,
        seed: int,
        settings: WorkerSettings,
        faults: Faults,
        *,
        listing_lag_millis: int = 1_000,
        roots: int = 3,
        generations: int = 3,
        shards: dict[str, ShardSpec] | None = None,
        directed: tuple[Directed, ...] = (),
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.kernel = Kernel(seed)
        self.settings = settings
        self.faults = faults
        self.table = RecordingStore(self.kernel)
        self.shards = shards if shards is not None else lineage(self.rng, self.kernel.now, roots, generations)
        self.script = Script(directed, self.kernel.now)
        self.listing_lag_millis = listing_lag_millis
        self.workers: dict[str, SimWorker] = {}
        self.deliveries: list[Delivery] = []
        self._joined = 0
        self.chaos = Group("chaos")

    # ------------------------------------------------------------------------- stream

    def available(self, spec: ShardSpec, now: int) -> int:
        if now >= spec.closes:
            return spec.length
        return spec.length * max(0, now - spec.born) // (spec.closes - spec.born)

    def list_shards(self, rng: random.Random, store: FaultyStore) -> tuple[Shard, ...]:
        """DescribeStream: takes time, and may show the stream as it was a moment ago. The listing is
        made when the request reaches the server; a process paused meanwhile gets it late."""
        fault = store.directed("list_shards")
        self.kernel.sleep(rng.randint(5, 30), through_pause=True)
        lag = fault.view_age_millis if fault is not None and fault.view_age_millis else None
        seen = self.kernel.now - (lag if lag is not None else rng.randint(0, self.listing_lag_millis))
        self.kernel.sleep(rng.randint(0, 20))
        store.answered(fault)
        return tuple(
            Shard(
                spec.shard_id,
                spec.parent,
                "0",
                str(10 * spec.length) if spec.closes <= seen else None,
            )
            for spec in self.shards.values()
            if spec.born <= seen
        )

    # ------------------------------------------------------------------------ workers

    def join(self) -> SimWorker:
        self._joined += 1
        name = f"w{self._joined}"
        skew = self.rng.randint(
            -self.settings.max_clock_skew_millis // 2, self.settings.max_clock_skew_millis // 2
        )
        clock = SimClock(self.kernel, skew)
        rng = random.Random(f"{self.seed}-{name}")
        store = FaultyStore(self.table, self.kernel, self.faults, rng, self.settings.failover_time_millis)
        coordinator = LeaseCoordinator(store, name, self.settings, clock, rng=rng)
        store.fenced = coordinator.fenced
        store.name, store.script = name, self.script
        syncer = ShardSyncer(
            list_shards=lambda: self.list_shards(rng, store),
            coordinator=coordinator,
            settings=self.settings,
            clock=clock,
        )
        worker = SimWorker(name, Group(name), coordinator, store, syncer)
        self.workers[name] = worker
        self.kernel.spawn(f"{name}-heartbeat", worker.group, lambda: self._heartbeats(worker))
        self.kernel.spawn(f"{name}-taker", worker.group, lambda: self._taker(worker), delay=1)
        self.kernel.spawn(f"{name}-sync", worker.group, lambda: self._sync(worker), delay=2)
        self.kernel.spawn(f"{name}-process", worker.group, lambda: self._process(worker), delay=3)
        return worker

    def alive(self) -> list[SimWorker]:
        return [w for w in self.workers.values() if not w.group.crashed]

    def _heartbeats(self, worker: SimWorker) -> None:
        c = worker.coordinator
        ok = c.heartbeat_once()
        while True:
            self.kernel.sleep(c.liveness.next_wait_millis(ok))
            ok = c.heartbeat_once()

    def _taker(self, worker: SimWorker) -> None:
        c = worker.coordinator
        while True:
            c.take_round()
            self.kernel.sleep(c.taker_wait_millis())

    def _sync(self, worker: SimWorker) -> None:
        while True:
            worker.syncer.sync()
            self.kernel.sleep(self.settings.shard_sync_interval_millis)

    def _process(self, worker: SimWorker) -> None:
        while True:
            self.kernel.sleep(TICK)
            for lease in worker.coordinator.held():
                self._step(worker, lease.shard_id)

    def _step(self, worker: SimWorker, shard_id: str) -> None:
        """One tick of the shard's consumer, modelled on the lifecycle's: a consumer starts from the
        lease's checkpoint, bound to the counter it was held under, keeps its own position, and ends
        the moment ``may_process`` refuses it (lost, fenced, or held under another ownership); the
        next tick starts a new one. Whether an old consumer may carry on is the product's call."""
        c = worker.coordinator
        spec = self.shards[shard_id]
        lease = {lease.shard_id: lease for lease in c.held()}.get(shard_id)
        if lease is None:
            worker.progress.pop(shard_id, None)
            return
        if shard_id not in worker.progress:
            start = int(lease.checkpoint.sequence) // 10 if lease.checkpoint.sequence.isdigit() else 0
            worker.progress[shard_id] = (lease.counter, start, start)
        counter, start, done = worker.progress[shard_id]
        try:
            if c.handoff_requested(shard_id):
                if done > start and c.may_process(shard_id, counter):
                    c.checkpoint(shard_id, str(done * 10), counter)
                c.release(shard_id, counter)
                worker.progress.pop(shard_id, None)
                return
            if spec.parent is not None and not c.is_shard_finished(spec.parent):
                return
        except LeaseError:
            return  # lost (the lease is gone from held()) or transient: next tick
        if not c.may_process(shard_id, counter):
            worker.progress.pop(shard_id, None)  # this consumer ends; a new one may start next tick
            return
        delivered = done < self.available(spec, self.kernel.now)
        if delivered:
            done += 1
            now = self.table.get(shard_id)
            owner = None if now is None else now.owner
            self.deliveries.append(Delivery(self.kernel.now, shard_id, worker.name, counter, done, owner))
            worker.progress[shard_id] = (counter, start, done)
        ended = done >= spec.length and self.kernel.now >= spec.closes
        if not delivered and not ended:
            return  # nothing new to record
        try:
            c.checkpoint(shard_id, "SHARD_END" if ended else str(done * 10), counter)
        except (LeaseError, ValueError):
            return  # lost, or transient: the next tick checkpoints what was delivered

    # -------------------------------------------------------------------------- chaos

    def chaos_thread(self, until: int, min_workers: int = 1) -> None:
        """Once a second: maybe pause a worker (SIGSTOP or a suspend), kill one, or add one."""
        failover = self.settings.failover_time_millis
        while self.kernel.now < until:
            self.kernel.sleep(1_000)
            alive = [w for w in self.alive() if w.group.paused_until <= self.kernel.now]
            roll = self.rng.random()
            if roll < 0.15 and alive:
                victim = self.rng.choice(alive)
                victim.group.paused_until = self.kernel.now + pause_millis(self.rng, failover)
            elif roll < 0.20 and len(self.alive()) > min_workers:
                self.rng.choice(self.alive()).group.crashed = True
            elif roll < 0.26 or not self.alive():
                self.join()
        self.faults.active = False

    def run(self, workers: int, chaos_millis: int, settle_millis: int, *, chaos: bool = True) -> bool:
        """Chaos for ``chaos_millis`` then calm; True when every shard finished within ``settle_millis``
        of the end of the chaos. Without ``chaos`` nothing pauses, kills or adds workers: only the
        fault model and the directed faults act."""
        for _ in range(workers):
            self.join()
        end_of_chaos = self.kernel.now + chaos_millis
        if chaos:
            self.kernel.spawn("chaos", self.chaos, lambda: self.chaos_thread(end_of_chaos))
        try:
            self.kernel.run_until(end_of_chaos)
            last_close = max(spec.closes for spec in self.shards.values())
            deadline = max(self.kernel.now, last_close) + settle_millis
            self.kernel.run_until(deadline, stop=self.all_finished)
            return self.all_finished()
        finally:
            self.kernel.shutdown()

    def all_finished(self) -> bool:
        return set(self.table.history.finished_at) >= set(self.shards)

"""The deployed fleet's data path, run by the real worker: slices of a history where what matters
happens inside the workers (simulation/world.py assembles them as the product does, on simulated
threads and time).

* ``rollover``: shards that end and hand over to children, generation after generation. Promise: a
  child's lease is taken within one taking interval of its parent's end (docs/leases.md), or of its
  creation when the children lookup (paced by the DescribeStream budget) comes later.
* ``hung-processor``: from a moment on, the processor never returns on one shard, in whichever
  worker runs it (bench/stall_move.py's hang: the stall follows the shard).
* ``hung-read``: likewise one shard's GetRecords.
  Promise for both: after each hang the shard's lease moves within 1.2 x the stall timeout to
  another worker, while one has no call stuck on it (no worker takes back a shard whose call there
  never returned: it would hang a second thread), and a page naming the shard comes within the
  stall timeout and the paging alarm's window (the template's alarm on ``StalledShards``, grouped
  by ShardId so that its notification names each stalled shard: an alarm on the fleet's series
  names none). The hung shard itself cannot finish; every other promise holds for it and for the
  others.

The stall timeout is :data:`STALL_SECONDS` (the slice sets ``worker.stall_timeout_millis`` when the
product has it; the promise scales with it). Every slice is also judged by the lease and delivery
promises of simulation/checker.py (nothing lost, nothing re-delivered by one owner, order, no
checkpoint past an unprocessed record, progress). The workers' metrics go through
:class:`~simulation.fleet_ops.period_metrics.PeriodMetrics` to the templates' own alarms,
evaluated every minute.
"""

from __future__ import annotations

import random
from typing import Any

from ground.settings import WorkerSettings
from simulation.checker import check as check_data
from simulation.faults import Faults
from simulation.fleet_ops.alarms import AlarmBook, AlarmSpec, MetricStore
from simulation.fleet_ops.clock import WALL0
from simulation.fleet_ops.environment import environment
from simulation.fleet_ops.period_metrics import PeriodMetrics
from simulation.fleet_ops.promises import OpsVerdict, Outcome
from simulation.histories import sim_settings
from simulation.kernel import Group
from simulation.stream import ShardSpec, lineage
from simulation.threads import SimEvent
from simulation.world import Plan, World

SLICE_KINDS = ("rollover", "hung-processor", "hung-read")
# Issue 46 measured children's start and stalls' moves at failover 3 s (bench/child_pickup.py,
# bench/stall_move.py: stall timeout 20 s): the slices run at the same, so the one taking interval and
# the 1.2 stall timeouts they are held to mean what the benches' rows mean.
FAILOVER = 3_000
STALL_SECONDS = 20.0
HANGS: dict[str, dict[str, Any]] = {}  # ledger id -> the hang the director chose


class HangingRecorder:
    """The function form (simulation.processors.Recorder), except on the one shard the slice chose,
    from the moment it chose it: there the call never returns, in whichever worker runs it (a
    downstream call with no timeout, as bench/stall_move.py's processor)."""

    def __init__(self, ledger: str, worker: str) -> None:
        from simulation.processors import Recorder

        self._ledger, self._worker = ledger, worker
        self._inner = Recorder(ledger, worker)

    def handle(self, batch: Any) -> Any:
        from simulation.processors import LEDGERS

        hang = HANGS.get(self._ledger)
        if hang is not None and hang["shard"] == batch.shard_id:
            kernel = LEDGERS[self._ledger].kernel
            hang["hangs"].append((self._worker, kernel.now))
            SimEvent(kernel).wait()  # forever
        return self._inner.handle(batch)


def _settings(stall: bool) -> Any:
    worker: dict[str, Any] = {
        "initial_position": "TRIM_HORIZON",
        "failover_time_millis": FAILOVER,
        "parent_shard_poll_interval_millis": 1_000,
        "max_clock_skew_millis": 500,
        "idle_time_between_reads_millis": 1_000,
    }
    if stall and "stall_timeout_millis" in WorkerSettings.model_fields:
        worker["stall_timeout_millis"] = int(STALL_SECONDS * 1000)
    processor = "simulation.fleet_ops.slices:HangingRecorder"
    return sim_settings(worker, {"processor": processor})


def _long_shards(start: int, count: int, life: int) -> dict[str, ShardSpec]:
    return {
        f"shardId-{i:04d}": ShardSpec(f"shardId-{i:04d}", None, start, start + life, life // 2_000)
        for i in range(1, count + 1)
    }


def run_slice(seed: int, kind: str | None, alarms: list[AlarmSpec] | None = None) -> Outcome:
    rng = random.Random(f"slice-{seed}")
    kind = kind or rng.choice(SLICE_KINDS)
    specs = alarms if alarms is not None else environment().alarms
    namespace = environment().settings.metrics_namespace
    stalls = kind != "rollover"
    settings = _settings(stalls)
    start = 1_000_000
    store = MetricStore()
    recorders: dict[str, PeriodMetrics] = {}

    def metrics_for(name: str) -> PeriodMetrics:
        recorders[name] = PeriodMetrics(name)
        return recorders[name]

    if stalls:
        window = max((s.window for s in specs if "StalledShards" in {n for _, n in s.reads}), default=300)
        hang_at = 60_000 + rng.randint(0, 30_000)
        length = hang_at + int((1.2 * STALL_SECONDS + window + 240) * 1000)
        shards = _long_shards(start, rng.randint(4, 8), length - 30_000)
    else:
        shards = lineage(rng, start, roots=rng.randint(6, 9), generations=4)
        length = max(s.closes for s in shards.values()) - start + 120_000
    world = World(
        seed,
        settings,
        Faults(),
        plan=Plan({"processor": "simulation.fleet_ops.slices:HangingRecorder"}),
        shards=shards,
        metrics_for=metrics_for,
    )
    pages: list[tuple[float, str, str]] = []  # when, which alarm, what it names
    book = AlarmBook(
        specs, store, lambda topic, spec, now, names: pages.append((now, spec.name, names)), lambda *a: None
    )
    hang: dict[str, Any] = {}
    verdict = OpsVerdict()
    kernel = world.kernel

    def wall() -> float:
        return WALL0 + (kernel.now - start) / 1000

    def minutes() -> None:
        book.create(wall())
        book.group_created(wall())  # the slice's fleet is running from the start
        while True:
            kernel.sleep(60_000)
            now = wall()
            for recorder in recorders.values():
                for dimensions, name, value in recorder.flush():
                    store.put(namespace, name, dimensions, now - 1, value)
            book.evaluate(now)

    def director() -> None:
        kernel.sleep(hang_at)
        held: list[tuple[str, str]] = []
        while not held:  # wait for the fleet to hold a lease (the first sync, the first takes)
            held = sorted((s, lease.owner) for s in shards if (lease := world.table.get(s)) and lease.owner)
            kernel.sleep(1_000)
        shard, owner = rng.choice(held)
        hang.update(worker=owner, shard=shard, at=kernel.now, hangs=[])
        if kind == "hung-processor":
            HANGS[world.ledger_id] = hang
            return
        for name, worker in world.workers.items():
            reads = worker.source.get_records

            def hanging(
                iterator: str,
                limit: int,
                shard_id: str,
                *,
                convert_images: bool = False,
                _reads: Any = reads,
                _name: str = name,
            ) -> Any:
                if shard_id == shard:
                    hang["hangs"].append((_name, kernel.now))
                    SimEvent(kernel).wait()
                return _reads(iterator, limit, shard_id, convert_images=convert_images)

            worker.source.get_records = hanging  # type: ignore[method-assign]

    try:
        world.start(3 if stalls else 4)
        kernel.spawn("minutes", Group("metrics"), minutes)
        if stalls:
            kernel.spawn("director", world.chaos, director)
        kernel.run_until(start + length, stop=None if stalls else world.all_finished)
        finished = world.all_finished()
    finally:
        world.close()
        HANGS.pop(world.ledger_id, None)
    data = check_data(world, finished)
    data.unfinished = [s for s in data.unfinished if s != hang.get("shard")]  # it cannot finish
    if not data.ok:
        verdict.data.append(f"the real worker's promises: {data}")
    verdict.lost = float(len(data.losses))
    text = f"{kind}: {len(shards)} shards, {len(world.workers)} real workers"
    if stalls:
        _judge_stall(world, hang, pages, verdict, length=length, start=start, window=window)
        text += f", {hang.get('shard')} hung in {hang.get('worker')} at {(hang.get('at', start) - start) / 1000:.0f} s"
    else:
        _judge_pickup(world, settings, verdict)
    return Outcome(seed, text, verdict)


def _judge_pickup(world: World, settings: Any, verdict: OpsVerdict) -> None:
    """Each child not held when its parent ended is taken within one taking interval of the later of
    its parent's end and its lease's creation (the lookup that creates it is paced by the
    DescribeStream budget: docs/streams.md)."""
    interval = settings.worker.taker_interval_millis
    history = world.table.history
    created = {shard_id: at for at, shard_id in history.created}
    worst = 0.0
    for shard_id, spec in world.shards.items():
        parent_end = history.finished_at.get(spec.parent) if spec.parent else None
        if parent_end is None or shard_id not in created:
            continue
        owners = history.owners.get(shard_id, [])
        held_then = None
        for t, owner in owners:
            if t <= parent_end:
                held_then = owner
        ready = max(parent_end, created[shard_id])
        later = [t for t, owner in owners if owner is not None and t >= ready]
        if held_then is not None or not later:
            continue  # held when its parent ended (or never taken: the progress promise says so)
        waited = later[0] - ready
        worst = max(worst, waited / interval)
        if waited > interval:
            verdict.data.append(
                f"child {shard_id} taken {waited / 1000:.1f} s after its parent {spec.parent} ended and its "
                f"lease was created (one taking interval: {interval / 1000:.1f} s)"
            )
    verdict.child_pickup_over_interval = worst


def _judge_stall(
    world: World,
    hang: dict[str, Any],
    pages: list[tuple[float, str, str]],
    verdict: OpsVerdict,
    *,
    length: int,
    start: int,
    window: float,
) -> None:
    hangs: list[tuple[str, int]] = hang.get("hangs", [])
    if not hangs:
        return  # the chosen shard had nothing more to read: nothing hung
    shard = hang["shard"]
    owners = world.table.history.owners.get(shard, [])
    stall = STALL_SECONDS * 1000
    end = start + length
    worst = 0.0
    seen = [worker for worker, _ in hangs]
    twice = sorted({worker for worker in seen if seen.count(worker) > 1})
    if twice:
        verdict.data.append(f"{shard} taken back and hung again by {twice}, whose calls on it were stuck")
    for worker, since in hangs:
        if not set(world.workers) - {w for w, t in hangs if t <= since}:
            continue  # every worker has a call stuck on it: nobody takes it again (the page says so)
        moved = [t for t, owner in owners if t > since and owner not in (None, worker)]
        took = (moved[0] if moved else end) - since
        if not moved and took <= 1.2 * stall:
            continue  # hung too near the end to judge
        worst = max(worst, took / stall)
        if took > 1.2 * stall:
            verdict.data.append(
                f"{shard} hung in {worker} at {(since - start) / 1000:.0f} s: "
                + (f"moved after {took / 1000:.0f} s" if moved else f"not moved in {took / 1000:.0f} s")
                + f" (stall timeout {STALL_SECONDS:.0f} s)"
            )
    verdict.stall_moved_over_timeout = worst
    first = WALL0 + (hangs[0][1] - start) / 1000
    stated = STALL_SECONDS + window + 60
    timely = [(at, names) for at, _, names in pages if first <= at <= first + stated]
    if not any(f"ShardId={shard}" in names.split("; ") for _, names in timely):
        said = f" (pages named: {[n for _, n in timely]})" if timely else ""
        verdict.unpaged_failures.append(
            f"{shard} hung from {(hangs[0][1] - start) / 1000:.0f} s ({len(hangs)} hang(s)): no page naming it "
            f"within {stated:.0f} s (the stall timeout and the StalledShards alarm's window){said}"
        )

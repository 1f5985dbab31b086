"""Fleet goals on the whole-worker simulator, calm apart from the one event each test is about: how
soon a dead worker's shards are processed again, a graceful stop's hand-over, a joining worker's share.

The simulator is the fault model's (world.py) with its faults off: real workers assembled from
simulated ports, a steady stream of long-lived shards with a record a second each. Times are
simulated milliseconds; the assertions are the goals docs/leases.md states.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import pytest

from simulation.faults import Faults
from simulation.histories import sim_settings
from simulation.stream import ShardSpec
from simulation.world import World

FAILOVER = 10_000
START = 1_000_000
LIFE = 600_000  # longer than any test: the shards stay open


@pytest.fixture(autouse=True)
def _quiet() -> object:
    logging.disable(logging.WARNING)
    yield None
    logging.disable(logging.NOTSET)


def steady_world(workers: int, leases: int, seed: int = 1) -> World:
    shards = {
        f"s{i:03d}": ShardSpec(f"s{i:03d}", None, START, START + LIFE, LIFE // 1_000) for i in range(leases)
    }
    settings = sim_settings(
        {
            "failover_time_millis": FAILOVER,
            "max_clock_skew_millis": 500,
            "idle_time_between_reads_millis": 200,
        }
    )
    world = World(seed, settings, Faults(), shards=shards)
    world.start(workers)
    run_until(world, lambda: owners(world) == leases, 10 * FAILOVER)
    run_until(world, lambda: False, 3 * FAILOVER)
    return world


def run_until(world: World, condition: Callable[[], bool], millis: int) -> bool:
    world.kernel.run_until(world.kernel.now + millis, stop=condition)
    return condition()


def owners(world: World) -> int:
    return sum(1 for shard in world.shards if (lease := world.table.get(shard)) and lease.owner)


def beat_of(world: World, worker: str) -> int | None:
    beat = world.table.get_heartbeat(worker)
    return None if beat is None else beat.at_wall_millis


def held_counts(world: World) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for shard in world.shards:
        lease = world.table.get(shard)
        if lease is not None and lease.owner is not None:
            counts[lease.owner] += 1
    return dict(counts)


def handled_twice(world: World) -> list[tuple[str, int]]:
    seen = Counter((h.shard_id, h.sequence_number) for h in world.ledger.handled)
    return [record for record, times in seen.items() if times > 1]


def first_handled_after(world: World, at: int, shards: set[str], not_by: str | None = None) -> dict[str, int]:
    resumed: dict[str, int] = {}
    for h in world.ledger.handled:
        if h.at >= at and h.shard_id in shards and h.worker != not_by:
            resumed.setdefault(h.shard_id, h.at)
    return resumed


def test_a_dead_workers_shards_are_processed_again_within_one_and_a_half_failover() -> None:
    world = steady_world(4, 32)
    try:
        victim = world.workers["w1"]
        orphans = {lease.shard_id for lease in victim.coordinator.held()}
        assert orphans
        # The worst moment to die: just after a heartbeat landed, so it looks alive as long as possible.
        last = beat_of(world, "w1")
        assert run_until(world, lambda: beat_of(world, "w1") != last, FAILOVER)
        died = world.kernel.now
        victim.group.crashed = True
        assert run_until(
            world, lambda: set(first_handled_after(world, died, orphans, "w1")) == orphans, 5 * FAILOVER
        )
        worst = max(first_handled_after(world, died, orphans, "w1").values()) - died
        assert worst <= 1.5 * FAILOVER, f"processed again after {worst} ms"
    finally:
        world.close()


def test_a_graceful_stop_hands_its_shards_on_within_one_taking_interval_without_duplicates() -> None:
    world = steady_world(4, 32)
    try:
        leaving = world.workers["w2"]
        shards = {lease.shard_id for lease in leaving.coordinator.held()}
        assert shards
        world.stop_gracefully(leaving)
        stopped = world.kernel.now
        assert run_until(
            world, lambda: set(first_handled_after(world, stopped, shards, "w2")) == shards, 5 * FAILOVER
        )
        worst = max(first_handled_after(world, stopped, shards, "w2").values()) - stopped
        bound = world.settings.worker.taker_interval_millis + 1_000  # a round, and the first read's wait
        assert worst <= bound, f"handed on after {worst} ms (bound {bound})"
        assert handled_twice(world) == [], "a record was handled twice"
    finally:
        world.close()


def test_a_joining_worker_gets_its_share_within_three_rounds_without_duplicates() -> None:
    world = steady_world(3, 60)
    try:
        world.join()
        run_until(world, lambda: False, 3 * world.settings.worker.taker_interval_millis)
        counts = held_counts(world)
        assert len(counts) == 4 and max(counts.values()) - min(counts.values()) <= 1, counts
        assert handled_twice(world) == [], "a record was handled twice"
    finally:
        world.close()

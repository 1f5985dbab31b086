"""Fleet simulations: the lease protocol's invariants and goals under crashes, pauses and joins."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from ground.settings import WorkerSettings
from tests.simulation.harness import TICK, Fleet

FAILOVER = 10_000
SETTINGS = WorkerSettings(failover_time_millis=FAILOVER, max_clock_skew_millis=500)


def three_generations(roots: int) -> dict[str, tuple[str, ...]]:
    """Rollover then split: root -> child -> two grandchildren."""
    shards: dict[str, tuple[str, ...]] = {}
    for r in range(roots):
        shards[f"g0-{r}"] = ()
        shards[f"g1-{r}"] = (f"g0-{r}",)
        shards[f"g2-{r}a"] = (f"g1-{r}",)
        shards[f"g2-{r}b"] = (f"g1-{r}",)
    return shards


def assert_single_owner(fleet: Fleet) -> None:
    by_tick: dict[tuple[int, str], set[str]] = defaultdict(set)
    for now, shard, worker, _ in fleet.log:
        by_tick[(now, shard)].add(worker)
    both = {key: workers for key, workers in by_tick.items() if len(workers) > 1}
    assert not both, f"shards processed by two workers at once: {sorted(both.items())[:5]}"


def assert_parents_first(fleet: Fleet, shards: dict[str, tuple[str, ...]]) -> None:
    """Every child's first unit of work comes after its parents' last one (log order is execution order)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, (_, shard, _, _) in enumerate(fleet.log):
        first.setdefault(shard, index)
        last[shard] = index
    for child, parents in shards.items():
        for parent in parents:
            assert first[child] > last[parent], f"{child} started before {parent} finished"


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=10, deadline=None)
def test_chaos_keeps_single_owner_lineage_order_and_finishes_everything(seed: int) -> None:
    rng = random.Random(seed)
    shards = three_generations(6)
    cap = WorkerSettings(failover_time_millis=FAILOVER, max_clock_skew_millis=500, max_leases_for_worker=2)
    fleet = Fleet(cap, {s: rng.randint(20, 200) for s in shards}, seed=seed)
    fleet.add_shards(shards)
    for i in range(4):
        fleet.join(f"w{i}")
    joined = 4
    for _ in range(60):  # one minute of chaos, one event draw per simulated second
        alive = [w.name for w in fleet.active()]
        roll = rng.random()
        if roll < 0.08 and len(alive) > 1:
            fleet.crash(rng.choice(alive))
        elif roll < 0.16 and alive:
            fleet.pause(rng.choice(alive), rng.randint(FAILOVER // 2, 2 * FAILOVER))
        elif roll < 0.24:
            fleet.join(f"w{joined}")
            joined += 1
        for _ in range(1000 // TICK):
            fleet.tick()
    if not fleet.active():
        fleet.join(f"w{joined}")
    assert fleet.run_until(fleet.all_finished, 20 * 60_000), "some shards were never finished"
    assert_single_owner(fleet)
    assert_parents_first(fleet, shards)


def steady_fleet(workers: int, leases: int, seed: int = 1) -> Fleet:
    fleet = Fleet(SETTINGS, {f"s{i:03d}": 10**9 for i in range(leases)}, seed=seed)
    fleet.add_shards({f"s{i:03d}": () for i in range(leases)})
    for i in range(workers):
        fleet.join(f"w{i}")
    fleet.run_until(lambda: sum(fleet.held_counts().values()) == leases, 10 * FAILOVER)
    fleet.run_until(lambda: False, 3 * FAILOVER)
    return fleet


def test_dead_workers_shards_resume_within_one_and_a_half_failover() -> None:
    fleet = steady_fleet(4, 64)
    victim = fleet.workers["w1"]
    # The worst moment to die: just after a heartbeat, so it looks alive as long as possible.
    fleet.run_until(lambda: fleet.now >= victim.next_heartbeat, 10_000)
    fleet.tick()
    died = fleet.now
    orphans = {lease.shard_id for lease in victim.coordinator.held()}
    assert orphans
    fleet.crash("w1")
    resumed: dict[str, int] = {}

    def all_resumed() -> bool:
        for now, shard, worker, _ in fleet.log:
            if now >= died and shard in orphans and worker != "w1":
                resumed.setdefault(shard, now)
        return set(resumed) == orphans

    assert fleet.run_until(all_resumed, 5 * FAILOVER)
    worst = max(resumed.values()) - died
    assert worst <= 1.5 * FAILOVER, f"resumed after {worst} ms"
    assert_single_owner(fleet)


def test_graceful_stop_resumes_within_one_taking_interval_without_duplicates() -> None:
    fleet = steady_fleet(4, 64)
    leaving = {lease.shard_id for lease in fleet.workers["w2"].coordinator.held()}
    start_log = len(fleet.log)
    fleet.stop_gracefully("w2")
    stopped = fleet.now
    resumed: dict[str, int] = {}

    def all_resumed() -> bool:
        for now, shard, _, _ in fleet.log[start_log:]:
            if shard in leaving:
                resumed.setdefault(shard, now)
        return set(resumed) == leaving

    assert fleet.run_until(all_resumed, 5 * FAILOVER)
    assert max(resumed.values()) - stopped <= SETTINGS.taker_interval_millis + TICK
    units = Counter((shard, unit) for _, shard, _, unit in fleet.log)
    assert not [k for k, n in units.items() if n > 1], "a unit of work was processed twice"


def test_joining_worker_balances_within_three_rounds_without_duplicates() -> None:
    fleet = steady_fleet(3, 256)
    fleet.join("w3")
    fleet.run_until(lambda: False, 3 * SETTINGS.taker_interval_millis)
    counts = fleet.held_counts()
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    units = Counter((shard, unit) for _, shard, _, unit in fleet.log)
    assert not [k for k, n in units.items() if n > 1], "a unit of work was processed twice"

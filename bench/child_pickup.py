"""Children of an ended shard: how soon after their parent's end they start, over the taking interval.

Method: the emulator serves a 6-partition stream whose shards roll over every 9 s (each open shard
closes and a child takes over its partition; the parent's records stay readable); 3 ``consumer
run`` processes share it with the product's defaults (failover 10 s: taker interval 3.3 s,
full-scan interval 20 s; parent_shard_poll_interval 10 s, shard sync every 60 s, DescribeStream
budget 5/s for the fleet); a writer puts 30 items/s round-robin over one key per partition, so every
shard has records until it closes. For each parent whose end a worker logged ("shard P ended;
looking up its children", when its consumer reached SHARD_END) and each child of it (the emulator's
true shard table), the time from that line to the child's consumer leaving WAITING_ON_PARENT_SHARDS
(its first step past the parent check, on whichever worker took it), over the taker interval.

Two phases of 75 s on one fleet: calm, then faults -- the stream answers 5 % of calls with a 500
and shows children 500 ms late, the leases and workers tables throttle 5 % of requests and answer
each one 20 ms slower. A row's values are the phase's children (min / median / max over them); its
goal holds every child within one taking interval (the median and the largest value, as every goal
is checked): a phase has about 50 children (6 partitions rolling over every 9 s for 75 s), and the
nearest-rank p99 of up to 100 values is the largest, so this is the p99 goal. A third, stated row: the calm phase again at failover 3 s (taker interval 1 s), where the
fleet's DescribeStream timetable alone can hold a lookup up to workers / (0.7 x budget) = 0.86 s.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import Ratio, at_most, stated
from bench.fleet_load import percentile
from bench.fleet_records import TABLE
from bench.fleet_support import Stack, bench_stack

PARTITIONS = 6
WORKERS = 3
ROLLOVER_SECONDS = 9
PHASE_SECONDS = 75
WRITES_PER_SECOND = 30
GOAL = 1.0
WORKER: dict[str, int] = {}  # the product's defaults
FAST = {"failover_time_millis": 3000, "max_clock_skew_millis": 100}
FAULTS: dict[str, float | str] = {
    "error_rate": 0.05,
    "child_visibility_delay_millis": 500,
    "table_throttle_rate": 0.05,
    "table_latency_millis": 20,
}
LIMITS = (
    "A child is created by its parent's owner when the parent's consumer reaches SHARD_END (one "
    "DescribeStream call filtered to the parent's children, retried after 1, 2, 4 ... s while the "
    "listing does not show them yet); the owner scans for it at once and takes it if its share allows, "
    "and otherwise its heartbeat row announces the free lease, which every other worker's next round "
    "(half a taking interval) reads. A child a listing created earlier, taken while its parent still "
    "ran, waits on parent_shard_poll_interval_millis instead."
)


def _ended(stack: Stack) -> dict[str, float]:
    """Each parent's end, as its owner logged it (the first time, should two workers have)."""
    ends: dict[str, float] = {}
    for name in stack.fleet.workers:
        for at, message in stack.log_times(name, "ended; looking up its children"):
            shard = message.split()[1]
            ends[shard] = min(at, ends.get(shard, at))
    return ends


def _started(stack: Stack) -> dict[str, float]:
    starts: dict[str, float] = {}
    for name in stack.fleet.workers:
        for at, message in stack.log_times(name, ": WAITING_ON_PARENT_SHARDS -> INITIALIZING"):
            shard = message.split()[1].rstrip(":")
            starts[shard] = min(at, starts.get(shard, at))
    return starts


def _pickups(stack: Stack, since: float, until: float) -> list[float]:
    """Child start - parent end, in taking intervals, for parents that ended within the window and
    whose children started (a child that never started by the end of the drain counts as the drain)."""
    parents = {s["shardId"]: s["parentShardId"] for s in stack.emulator.control.shards(TABLE)}
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        if parent:
            children.setdefault(parent, []).append(child)
    ends, starts = _ended(stack), _started(stack)
    taker = stack.taker_millis / 1000
    found = []
    for parent, ended in ends.items():
        if not since <= ended < until:
            continue
        for child in children.get(parent, []):
            started = starts.get(child, time.time())
            found.append(max(0.0, started - ended) / taker)
    return found


def _phase(stack: Stack, faults: dict[str, float | str] | None) -> list[float]:
    if faults:
        tables = f"{stack.settings.leases_table_name},{stack.settings.workers_table_name}"
        stack.emulator.control.set_faults(**faults, table_fault_tables=tables)
    since = time.time()
    time.sleep(PHASE_SECONDS)
    until = time.time()
    time.sleep(4 * stack.taker_millis / 1000 + 2)  # the last ends' children start
    if faults:
        stack.emulator.control.set_faults(**{name: 0 for name in faults}, table_fault_tables="*")
    stack.check_workers()
    return _pickups(stack, since, until)


def _fleet(worker: dict[str, int], phases: tuple[dict[str, float | str] | None, ...]) -> list[list[float]]:
    with bench_stack(
        "child-pickup",
        partitions=PARTITIONS,
        worker=worker,
        changelog=False,
        emulator={"rollover_seconds": ROLLOVER_SECONDS},
    ) as stack:
        for _ in range(WORKERS):
            stack.fleet.start_worker()
        writer = stack.writer(WRITES_PER_SECOND).start()
        try:
            stack.wait_balanced(timeout=90)
            time.sleep(2 * ROLLOVER_SECONDS)  # the fleet past its first generations
            found = [_phase(stack, faults) for faults in phases]
        finally:
            writer.stop()
        for problem in stack.problems()[:5]:
            print(f"  worker log: {problem[:200]}")
        return found


def _row(name: str, values: list[float], what: str, failover: str, goal: bool) -> Ratio:
    if not values:
        raise RuntimeError(f"no parent ended during the {what} phase")
    p99 = percentile(values, 99)
    method = (
        f"p99 {p99:.3f} over {len(values)} children ({what}): "
        f"{PARTITIONS} partitions rolling over every {ROLLOVER_SECONDS} s, {WORKERS} consumer run "
        f"processes on the emulator, {failover}; parent's SHARD_END line -> child's consumer past "
        "WAITING_ON_PARENT_SHARDS, over the taker interval"
    )
    print(f"{name}: p99 {p99:.3f}, values {sorted(round(v, 2) for v in values)}")
    if not goal:
        return stated(name, tuple(values), method)
    return at_most(name, tuple(values), GOAL, method)


def run() -> list[Ratio]:
    calm, faulty = _fleet(WORKER, (None, FAULTS))
    (fast,) = _fleet(FAST, (None,))
    default = "the product's defaults (failover 10 s, taker interval 3.3 s)"
    return [
        _row("child_start_after_parent_end_over_taker_interval", calm, "calm", default, True),
        _row(
            "child_start_after_parent_end_over_taker_interval_with_faults",
            faulty,
            _faults_text(),
            default,
            True,
        ),
        _row(
            "child_start_after_parent_end_over_taker_interval_failover_3s",
            fast,
            "calm",
            "failover 3 s (taker interval 1 s)",
            False,
        ),
    ]


def _faults_text() -> str:
    parts: list[Any] = [f"{k}={v}" for k, v in FAULTS.items()]
    return "with faults: " + ", ".join(parts) + " (tables: leases and workers)"

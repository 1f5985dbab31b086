"""Leases-table cost at steady state: this design's consumed units over the Java KCL's.

Method: M lease coordinators share one in-memory table through a store that charges each request
with DynamoDB's capacity rules (bench.capacity.MeteredStore); they run their real heartbeat and
taker timers on a fake clock until all S leases are held, then for 600 simulated seconds (about 30
scan periods); the units consumed per second are compared with the Java KCL's for the same settings
(renewal of every lease every failover/3 - epsilon, a full scan per worker every 2 x (failover +
epsilon); formula in bench/lease_cost_model.py), in 9 cells: S in {16, 256, 1024} x M in {1, 4, 16}.
The run is deterministic (the fake clock; the coordinators' random choices do not change a settled
fleet's reads), so each cell is one value and a row's spread is over the cells.

The KCL side is a model: its documented timers as a formula, not a KCL fleet measured here. The
reads are split by table, which is the argument for where the goal stands: the leases table is
scanned in full every ``full_scan_interval`` (2 x failover, the KCL's period but for epsilon) unless
a change asks for more (``leases_table_read_units_over_kcl``, stated); the workers table is read
every taker round (failover/6), at DynamoDB's minimum of 0.5 read units per Scan while it is under
4 KB (``workers_table_read_units_over_one_scan_per_round``, stated): it is what lets a dead worker's
leases be taken within 1.5 x failover, a joining worker get its share within 3 rounds and a stopping
one's leases be adopted within a taking interval, where the KCL notices a dead worker only at its
next scan. So the total (``lease_table_read_units_over_kcl``, goal <= 1) is above the KCL's in every
cell, by the workers table's reads: 12.8 x at 16 leases, 1.2 x at 1 024.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.capacity import MeteredStore, item_bytes, lease_size, scan_units
from bench.common import Ratio, at_most, stated
from bench.lease_cost_model import kcl_units_per_second
from consumer.api.leases import ExtendedSequenceNumber, Lease, Snapshot, heartbeat_to_item
from consumer.api.worker import InMemoryLeaseStore, LeaseCoordinator
from ground.clock import FakeClock
from ground.settings import WorkerSettings

LIMITS = (
    "reads: the leases table is read as the KCL reads it (leases_table_read_units_over_kcl, ~1.00 in every "
    "cell: a full scan per worker every 2 x failover, the KCL's period but for epsilon); the rest is the "
    "workers table, one Scan per worker per taker round (failover/6) at DynamoDB's minimum of 0.5 read "
    "units (workers_table_read_units_over_one_scan_per_round ~1.00): liveness, joins and graceful stops "
    "read there, for failover within 1.5 x failover, a joiner's share within 3 rounds, hand-overs within a "
    "taking interval. Reading it no more than the KCL scans (every 2 x failover) would give those up; on "
    "small tables it is several times the KCL's scans (S = 16: 0.3 units/s per worker against 0.025). "
    "Cost: writes are one heartbeat per worker instead of one renewal per lease (M/S of the KCL's), so at "
    "provisioned prices (WCU = 5 x RCU) the table costs a few % of the KCL's, but more where workers are "
    "as many as leases (16/16: 1.18 x)."
)
SHARDS = (16, 256, 1024)
WORKERS = (1, 4, 16)
TICK = 50
MEASURE_MILLIS = 600_000  # ~30 of the KCL's scan periods: a window's count of full scans is whole


class SplitMeteredStore(MeteredStore):
    """MeteredStore that also keeps the workers table's share of the read units."""

    def __init__(self, inner: InMemoryLeaseStore) -> None:
        super().__init__(inner)
        self.workers_read_units = 0.0

    def _beats(self, snapshot: Snapshot) -> None:
        beats = sum(item_bytes(heartbeat_to_item(beat)) for beat in snapshot.heartbeats.values())
        self.workers_read_units += scan_units(beats)

    def scan(self) -> Snapshot:
        snapshot = super().scan()
        self._beats(snapshot)
        return snapshot

    def scan_workers(self) -> Snapshot:
        snapshot = super().scan_workers()
        self._beats(snapshot)
        return snapshot


@dataclass(frozen=True)
class Cell:
    """One cell's units per second: ours (reads split by table) and the KCL's formula's."""

    reads: float
    workers_reads: float
    writes: float
    rounds: float  # taker rounds per second, the fleet's
    workers_scan_units: float  # one Scan of the workers table as the fleet's rows stand
    kcl_reads: float
    kcl_writes: float

    @property
    def leases_reads(self) -> float:
        return self.reads - self.workers_reads

    @property
    def workers_over_one_scan_per_round(self) -> float:
        return self.workers_reads / (self.rounds * self.workers_scan_units)


def measure(shards: int, workers: int, settings: WorkerSettings, seed: int = 0) -> Cell:
    """One cell; ``seed`` seeds the coordinators' random choices."""
    clock = FakeClock()
    store = SplitMeteredStore(InMemoryLeaseStore())
    for i in range(shards):
        store.inner.create_if_absent(
            Lease(
                f"shardId-00000001700000000000-{i:08x}",
                None,
                0,
                ExtendedSequenceNumber("49590338271490256608559692538361571095921575989136588898"),
            )
        )
    coordinators = [
        LeaseCoordinator(
            store,
            f"ip-10-0-{w}-7.ec2.internal:{4000 + w}:{w:08x}",
            settings,
            clock,
            rng=random.Random(seed * 1000 + w),
        )
        for w in range(workers)
    ]
    due = {id(c): [0, 0] for c in coordinators}
    rounds = 0

    def run(millis: int) -> None:
        nonlocal rounds
        end = clock.monotonic_millis() + millis
        while clock.monotonic_millis() < end:
            now = clock.monotonic_millis()
            for c in coordinators:
                beat, take = due[id(c)]
                if now >= beat:
                    c.heartbeat_once()
                    due[id(c)][0] = now + settings.renewal_interval_millis
                if now >= take:
                    c.take_round()
                    rounds += 1
                    due[id(c)][1] = now + c.taker_wait_millis()  # as the taker loop waits
                # What the lifecycle does with a lease it is asked to hand over: checkpoint, release.
                for lease in c.held():
                    if c.handoff_requested(lease.shard_id):
                        c.release(lease.shard_id)
            clock.advance(TICK)

    run(10 * settings.failover_time_millis)
    counts = [len(c.held()) for c in coordinators]
    assert sum(counts) == shards, f"only {sum(counts)} of {shards} leases held after warm-up"
    assert max(counts) - min(counts) <= 1, f"fleet not balanced after warm-up: {counts}"
    store.meter.read_units = store.meter.write_units = store.workers_read_units = 0
    rounds = 0
    run(MEASURE_MILLIS)
    seconds = MEASURE_MILLIS / 1000
    sample = next(iter(store.inner.scan().leases.values()))
    kcl = kcl_units_per_second(
        shards,
        workers,
        lease_size(sample),
        settings.failover_time_millis,
        epsilon_millis=settings.epsilon_millis,
    )
    heartbeats = store.inner.scan_workers().heartbeats.values()
    return Cell(
        reads=store.meter.read_units / seconds,
        workers_reads=store.workers_read_units / seconds,
        writes=store.meter.write_units / seconds,
        rounds=rounds / seconds,
        workers_scan_units=scan_units(sum(item_bytes(heartbeat_to_item(b)) for b in heartbeats)),
        kcl_reads=kcl.reads_per_second,
        kcl_writes=kcl.writes_per_second,
    )


def run() -> list[Ratio]:
    settings = WorkerSettings()
    print(__doc__)
    print(
        f"settings: failover {settings.failover_time_millis} ms, renewal {settings.renewal_interval_millis} ms, "
        f"taker {settings.taker_interval_millis} ms, full scans {settings.full_scan_interval_millis} ms, "
        f"skew {settings.max_clock_skew_millis} ms; units/s"
    )
    print(
        f"{'S':>5} {'M':>3} | {'ours R/s':>9} {'leases':>8} {'workers':>8} {'KCL R/s':>9} {'R ratio':>8} "
        f"{'leases/KCL':>10} {'wk/min':>7} | {'ours W/s':>9} {'KCL W/s':>9} {'W ratio':>8}"
    )
    cells = [measure(shards, workers, settings) for shards in SHARDS for workers in WORKERS]
    for (shards, workers), c in zip(((s, m) for s in SHARDS for m in WORKERS), cells, strict=True):
        print(
            f"{shards:>5} {workers:>3} | {c.reads:9.3f} {c.leases_reads:8.3f} {c.workers_reads:8.3f} "
            f"{c.kcl_reads:9.3f} {c.reads / c.kcl_reads:8.2f} {c.leases_reads / c.kcl_reads:10.3f} "
            f"{c.workers_over_one_scan_per_round:7.3f} | {c.writes:9.3f} {c.kcl_writes:9.3f} "
            f"{c.writes / c.kcl_writes:8.3f}"
        )
    method = (
        "consumed units/s (MeteredStore: DynamoDB's capacity rules) over the KCL's, S in {16,256,1024} x M in "
        "{1,4,16}, 600 simulated s of a settled fleet; spread over the 9 cells"
    )
    model = (
        "the KCL's units are a formula of its documented timers (bench/lease_cost_model.py), not a KCL run"
    )
    # Provisioned capacity prices a write unit at 5 x a read unit (us-east-1 list prices).
    cost = tuple((c.reads + 5 * c.writes) / (c.kcl_reads + 5 * c.kcl_writes) for c in cells)
    return [
        at_most(
            "lease_table_read_units_over_kcl",
            tuple(c.reads / c.kcl_reads for c in cells),
            1.0,
            method + "; both tables: the leases table's scans and the workers table's reads",
            model=model,
        ),
        stated(
            "leases_table_read_units_over_kcl",
            tuple(c.leases_reads / c.kcl_reads for c in cells),
            method + "; the leases table's reads alone (its full scans), over the KCL's scans",
            model=model,
        ),
        stated(
            "workers_table_read_units_over_one_scan_per_round",
            tuple(c.workers_over_one_scan_per_round for c in cells),
            "the workers table's read units over one Scan of it (DynamoDB's minimum read: 0.5 units under 4 KB) "
            "per worker per taker round, the rounds counted; same cells",
        ),
        at_most(
            "lease_table_write_units_over_kcl",
            tuple(c.writes / c.kcl_writes for c in cells),
            1.0,
            method,
            model=model,
        ),
        at_most("lease_table_cost_over_kcl", cost, 1.0, method + "; cost = RCU + 5 x WCU", model=model),
    ]


if __name__ == "__main__":
    for ratio in run():
        print(ratio.line())

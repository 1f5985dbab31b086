"""Leases-table cost at steady state: this design's consumed units over the Java KCL's.

Method: M lease coordinators share one in-memory table through a store that charges each request
with DynamoDB's capacity rules (bench.capacity.MeteredStore); they run their real heartbeat and
taker timers on a fake clock until all S leases are held, then for 120 simulated seconds; the units
consumed per second are compared with the Java KCL's for the same settings (renewal of every lease
every failover/3, a full scan per worker every 2 x failover; formula in bench/lease_cost_model.py).
"""

from __future__ import annotations

import random

from bench.capacity import MeteredStore, lease_size
from bench.common import Ratio, at_most
from bench.lease_cost_model import kcl_units_per_second
from consumer.api.leases import ExtendedSequenceNumber, Lease
from consumer.api.worker import InMemoryLeaseStore, LeaseCoordinator
from ground.clock import FakeClock
from ground.settings import WorkerSettings

LIMITS = (
    "every worker reads the workers table every failover/3 (liveness, for failover within 1.5 x "
    "failover) and the leases table when a change asks for it or every 2 x failover; on small tables "
    "the workers-table read alone (DynamoDB's 0.5-unit minimum per Scan) is several times the KCL's "
    "reads there, a fraction of a unit per second. Writes are one heartbeat per worker instead of one "
    "renewal per lease (M/S of the KCL's); at provisioned prices (WCU = 5 x RCU) the table costs a few % "
    "of the KCL's, but about as much where workers are as many as leases (16/16). bench/taker_scale.py "
    "runs 10 000 leases and 100 workers."
)
SHARDS = (16, 256, 1024)
WORKERS = (1, 4, 16)
TICK = 50
MEASURE_MILLIS = 120_000


def measure(shards: int, workers: int, settings: WorkerSettings) -> tuple[float, float, float, float]:
    clock = FakeClock()
    store = MeteredStore(InMemoryLeaseStore())
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
            store, f"ip-10-0-{w}-7.ec2.internal:{4000 + w}:{w:08x}", settings, clock, rng=random.Random(w)
        )
        for w in range(workers)
    ]
    due = {id(c): [0, 0] for c in coordinators}

    def run(millis: int) -> None:
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
    store.meter.read_units = store.meter.write_units = 0
    run(MEASURE_MILLIS)
    seconds = MEASURE_MILLIS / 1000
    ours_r, ours_w = store.meter.read_units / seconds, store.meter.write_units / seconds
    sample = next(iter(store.inner.scan().leases.values()))
    kcl = kcl_units_per_second(shards, workers, lease_size(sample), settings.failover_time_millis)
    return ours_r, ours_w, kcl.reads_per_second, kcl.writes_per_second


def run() -> list[Ratio]:
    settings = WorkerSettings()
    print(__doc__)
    print(
        f"settings: failover {settings.failover_time_millis} ms, renewal {settings.renewal_interval_millis} ms, "
        f"taker {settings.taker_interval_millis} ms, skew {settings.max_clock_skew_millis} ms"
    )
    print(
        f"{'S':>5} {'M':>3} | {'ours R/s':>9} {'KCL R/s':>9} {'R ratio':>8} | {'ours W/s':>9} {'KCL W/s':>9} {'W ratio':>8}"
    )
    reads: list[float] = []
    writes: list[float] = []
    total: list[float] = []
    for shards in SHARDS:
        for workers in WORKERS:
            ours_r, ours_w, kcl_r, kcl_w = measure(shards, workers, settings)
            reads.append(ours_r / kcl_r)
            writes.append(ours_w / kcl_w)
            # Provisioned capacity prices a write unit at 5 x a read unit (us-east-1 list prices).
            total.append((ours_r + 5 * ours_w) / (kcl_r + 5 * kcl_w))
            print(
                f"{shards:>5} {workers:>3} | {ours_r:9.2f} {kcl_r:9.2f} {ours_r / kcl_r:8.2f} | "
                f"{ours_w:9.2f} {kcl_w:9.2f} {ours_w / kcl_w:8.2f}"
            )
    method = "consumed units/s over KCL's, S in {16,256,1024} x M in {1,4,16}; spread is over the 9 cells"
    return [
        at_most("lease_table_read_units_over_kcl", tuple(reads), 1.0, method),
        at_most("lease_table_write_units_over_kcl", tuple(writes), 1.0, method),
        at_most("lease_table_cost_over_kcl", tuple(total), 1.0, method + "; cost = RCU + 5 x WCU"),
    ]


if __name__ == "__main__":
    for ratio in run():
        print(ratio.line())

"""A small simulated fleet that publishes through the real MetricsRecorder into a JSONL file.

Three workers share 8 leases (N = 4, so 2N = 8); the third worker joins a third of the way in and
leases converge. Used by the dashboard test; run as a module for a quick picture without the
emulator: ``.venv/bin/python -m tests.functional.telemetry.fleet_sim var/sim.jsonl``, then
``consumer dashboard --from-file var/sim.jsonl --out var/sim.png``. (docs/dashboard.png comes from a
``make demo`` run: see docs/observability.md.)
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.transports import JsonlFileTransport
from ground.clock import FakeClock
from ground.settings import Settings


def simulate(path: Path, settings: Settings, periods: int = 36, seed: int = 3) -> dict[str, int]:
    """Returns the totals the simulated processors saw (to check the dashboard's sums against)."""
    rng = random.Random(seed)
    clock = FakeClock(start_millis=time.time_ns() // 1_000_000 - periods * 5_000)
    workers = ["worker-a", "worker-b", "worker-c"]
    recorders = {
        w: MetricsRecorder(settings, w, JsonlFileTransport(path), clock, sample_process=False)
        for w in workers
    }
    seen = {"RecordsProcessed": 0, "TableWrites": 0}
    for period in range(periods):
        active = workers if period >= periods // 3 else workers[:2]
        leases = _split(8, active, period, periods)
        for worker in active:
            rec = recorders[worker]
            rec.gauge("RenewAllLeases", "CurrentLeases", leases[worker], "Count")
            rec.gauge("TakeLeases", "TotalLeases", 8, "Count")
            rec.gauge("TakeLeases", "NumWorkers", len(active), "Count")
            rec.gauge("Process", "CpuUtilization", 8 + 4 * leases[worker] + rng.random() * 5, "Percent")
            rec.gauge("Process", "MemoryResident", 70 + 3 * leases[worker] + period * 0.2, "Megabytes")
            rec.count("LeaseTable", "LeaseTableConsumedReadCapacity", 2 + leases[worker] * 0.5)
            rec.count("LeaseTable", "LeaseTableConsumedWriteCapacity", 2 + leases[worker])
            for shard in range(leases[worker]):
                records = rng.randint(20, 60)
                seen["RecordsProcessed"] += records
                rec.count("ProcessTask", "RecordsProcessed", records, shard_id=f"shardId-{worker}-{shard}")
                lag = rng.randint(200, 900) + (
                    4_000 if period == periods // 3 and worker == "worker-c" else 0
                )
                rec.gauge(
                    "ProcessTask", "MillisBehindLatest", lag, "Milliseconds", shard_id=f"shardId-{shard}"
                )
            if rng.random() < 0.15:
                rec.count("ProcessTask", "RecordsRetried", rng.randint(1, 10))
        writes = seen["RecordsProcessed"] - seen["TableWrites"]
        seen["TableWrites"] += writes
        recorders["worker-a"].count("LoadGenerator", "TableWrites", writes)
        clock.advance(5_000)
        for rec in recorders.values():
            rec.flush()
    for rec in recorders.values():
        rec.stop(timeout_seconds=5)
    return seen


def _split(total: int, active: list[str], period: int, periods: int) -> dict[str, int]:
    if len(active) == 2:
        return {active[0]: total // 2, active[1]: total - total // 2}
    joined = period - periods // 3  # one lease stolen per period until balanced (3/3/2)
    c = min(joined + 1, 2)
    a = (total - c + 1) // 2
    return {active[0]: a, active[1]: total - c - a, active[2]: c}


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "var/sim.jsonl")
    target.unlink(missing_ok=True)
    base = Settings.model_validate(
        {
            "application_name": "orders-stream-consumer",
            "table": {"name": "orders", "partition_key": {"name": "pk"}, "partitions": 4},
            "metrics": {"destination": "none", "shard_id_dimension": True, "flush_interval_seconds": 5},
        }
    )
    print(simulate(target, base))

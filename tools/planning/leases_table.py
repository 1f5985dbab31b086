"""The leases table's traffic for N partitions and M workers: ours (a heartbeat row per worker, a
checkpoint per poll), the Java KCL's for comparison (every lease renewed every failover / 3), and
whether a provisioned table's capacity carries ours, since its throttling loses leases.
"""

from __future__ import annotations

import math

from ground.settings import Settings
from tools.planning.figures import Sheet

# Size of one lease item in the leases table, in bytes (key, owner, counter, checkpoint, parents).
LEASE_ITEM_BYTES = 300
# Size of one worker heartbeat row.
HEARTBEAT_ITEM_BYTES = 120


def scan_read_units(items: float, item_bytes: float) -> float:
    """Read units one eventually consistent Scan of the table consumes (0.5 per 4 KB, rounded up)."""
    return math.ceil(items * item_bytes / 4096) * 0.5 if items > 0 else 0.5


def per_second(*interval_millis: int) -> float:
    """How many times per second a set of timers fire together."""
    return sum(1000 / millis for millis in interval_millis)


def lease_table(sheet: Sheet, settings: Settings, n: int, workers: float) -> None:
    """The leases table's traffic, ours and the Java KCL's for comparison, and whether a provisioned
    table's capacity carries ours (its throttling loses leases).

    Steady state holds about 2N leases (open shards plus finished ones awaiting cleanup), and every
    active shard checkpoints at most once per poll."""
    add, worker = sheet.add, settings.worker
    leases = 2 * n
    failover_s = worker.failover_time_millis / 1000
    poll_s = (
        max(worker.idle_time_between_reads_millis, settings.processing.batching.max_window_millis, 1) / 1000
    )
    checkpoints = n / poll_s
    scan = scan_read_units(
        leases + workers, (LEASE_ITEM_BYTES * leases + HEARTBEAT_ITEM_BYTES * workers) / (leases + workers)
    )
    heartbeats = workers / (worker.renewal_interval_millis / 1000)
    ours_w = add(
        "lease_table_write_units",
        heartbeats + checkpoints,
        "WCU/s",
        "M / renewal_interval (one heartbeat per worker) + N / poll interval (checkpoints)",
    )
    # A shard behind the stream's tip is read again at once, at most once per
    # min_time_between_reads, and checkpoints after each batch: after an outage or a load spike
    # every shard may be catching up at that rate together.
    catch_up_reads = (
        per_second(max(worker.min_time_between_reads_millis, 1)) if worker.catch_up_behind_millis else 0.0
    )
    add(
        "lease_table_write_units_catching_up",
        heartbeats + max(n * catch_up_reads, checkpoints),
        "WCU/s",
        "M / renewal_interval + N / min_time_between_reads (every shard catching up, a checkpoint per read)",
    )
    ours_r = add(
        "lease_table_read_units",
        workers * scan * per_second(worker.taker_interval_millis, worker.shard_sync_interval_millis),
        "RCU/s",
        "M x scan(2N leases + M heartbeats) x (1/taker_interval + 1/shard_sync_interval); "
        "scan = ceil(bytes / 4 KB) x 0.5",
    )
    kcl_scan = scan_read_units(leases, LEASE_ITEM_BYTES)
    add(
        "kcl_lease_table_write_units",
        leases / (failover_s / 3) + checkpoints,
        "WCU/s",
        "Java KCL: 2N leases renewed every failover/3 + checkpoints",
    )
    add(
        "kcl_lease_table_read_units",
        workers * kcl_scan * (1 / (2 * failover_s) + 1000 / worker.shard_sync_interval_millis),
        "RCU/s",
        "Java KCL: M x scan(2N leases) x (1/(2 x failover) + 1/shard_sync_interval)",
    )
    if worker.lease_table_billing_mode == "PROVISIONED":
        # The emulator does not enforce capacity: there the figures only say what AWS would need.
        capacity_advice = sheet.notes if settings.on_emulator else sheet.warnings
        where = " (on AWS; the emulator does not throttle)" if settings.on_emulator else ""
        if ours_w > worker.initial_lease_table_write_capacity:
            capacity_advice.append(
                f"leases table needs ~{ours_w:.1f} WCU/s but initial_lease_table_write_capacity is "
                f"{worker.initial_lease_table_write_capacity}: throttling of the leases table loses leases{where}"
            )
        if ours_r > worker.initial_lease_table_read_capacity:
            capacity_advice.append(
                f"leases table needs ~{ours_r:.1f} RCU/s but initial_lease_table_read_capacity is "
                f"{worker.initial_lease_table_read_capacity}: throttling of the leases table loses leases{where}"
            )

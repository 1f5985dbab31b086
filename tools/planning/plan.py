"""Capacity planner: the usual sizing formulas for DynamoDB Streams consumers applied to one
environment's settings (a Kinesis source's stream figures: tools/planning/kinesis.py).

Every figure carries the formula it came from, so ``consumer plan`` can be checked by hand; the
settings it read are listed as its inputs, and a configured value that contradicts its advice is
flagged next to the advice. Pure: settings in, a :class:`Plan` out.

A warning is a value that puts the fleet at risk (it falls behind, cannot hold its shards, is
throttled, oversubscribes its cores); a note is a deliberate choice the plan only prices or explains
(headroom above the recommended fleet, a cap that never binds, a table past the KCL defaults that is
already tuned). Only values the configuration sets are judged: a planning default the user never
set (``fleet.desired_instances``) is not warned about. On the emulator N is the emulator's
partition count, and the leases table's capacity is not enforced (a note, not a warning).

The formulas: DynamoDB gives a partition 3 000 RCU, 1 000 WCU and 10 GB; each partition writes one
open shard, and with rollovers every ~4 h and 24 h retention up to 6N shards are readable; a worker
should hold between N/M and 6N/M leases (N/M alone lets every worker fill up with children waiting
for parents nobody may take); the KCL defaults want tuning above 50 partitions or 100 writes/s per
partition; the leases table's default 10 RCU/WCU is often too low, and its throttling loses leases.
"""

from __future__ import annotations

import math

from consumer.api.leases import suggested_max_leases_for_worker
from ground.settings import UNBOUNDED, Settings
from tools.planning.figures import Plan, Sheet
from tools.planning.kinesis import READABLE_SHARDS_FACTOR, kinesis_stream
from tools.planning.leases_table import lease_table

# Past either of these the KCL defaults need tuning (the usual guidance for DynamoDB Streams).
PARTITIONS_TO_TUNE = 50
WRITES_PER_PARTITION_TO_TUNE = 100
# Stream record size relative to the item, by view type (images carried per record).
IMAGES_PER_RECORD = {"NEW_AND_OLD_IMAGES": 2.0, "NEW_IMAGE": 1.0, "OLD_IMAGE": 1.0, "KEYS_ONLY": 0.1}
# Instance types a fleet commonly uses: (vCPU, memory GiB). Unknown types fall back to 2 / 4.
INSTANCE_TYPES: dict[str, tuple[int, float]] = {
    "t3.small": (2, 2),
    "t3.medium": (2, 4),
    "t3.large": (2, 8),
    "t3.xlarge": (4, 16),
    "m7i.large": (2, 8),
    "m7i.xlarge": (4, 16),
    "m7i.2xlarge": (8, 32),
    "c7i.large": (2, 4),
    "c7i.xlarge": (4, 8),
    "c7i.2xlarge": (8, 16),
    "c7i.4xlarge": (16, 32),
    "c7g.large": (2, 4),
    "c7g.xlarge": (4, 8),
    "c7g.2xlarge": (8, 16),
    "r7i.large": (2, 16),
    "r7i.xlarge": (4, 32),
}


def make_plan(settings: Settings) -> Plan:
    sheet = Sheet()
    views = settings.per_stream()
    n = _partitions(sheet, settings, views)
    workers, recommended = _fleet(sheet, settings, views, n)
    _lease_caps(sheet, settings, n, workers, recommended)
    lease_table(sheet, settings, n, workers)
    sheet.add(
        "scale_out_threshold",
        settings.scaling.returned_item_count_multiplier * n,
        "leases",
        "returned_item_count_multiplier x N: the leases-table Scan ReturnedItemCount that adds an instance",
    )
    # A shipped deployable environment has no account yet: that is the user's next step, not a fault.
    sheet.warnings.extend(settings.warnings(account=False))
    needed = settings.account_needed()
    if needed is not None:
        sheet.notes.append(f"before deploying: {needed}")
    return Plan(settings.env, sheet.figures, sheet.warnings, sheet.notes, plan_inputs(settings))


def _partitions(sheet: Sheet, settings: Settings, views: tuple[Settings, ...]) -> int:
    """The table: its partitions N (each stream's first, with several), write units and shards, and
    whether it is past the point where the KCL defaults need tuning. Returns N."""
    add, worker = sheet.add, settings.worker
    if settings.several_streams:  # each stream sized on its own first; the fleet below serves all
        for view in views:
            name = view.table.source_table_name
            view_n, view_formula = view.partitions()
            add(f"{name}.partitions_N", view_n, "partitions", view_formula)
            add(
                f"{name}.table_write_units",
                view.table.write_units_per_second(),
                "WCU/s",
                "as table_write_units",
            )
            add(f"{name}.shards_max", 6 * view_n, "shards", "6N of this table")
    n, n_formula = settings.partitions()
    add("partitions_N", n, "partitions", n_formula)
    if settings.source.is_kinesis:  # a stream of shards, no table partitions and no rollovers
        kinesis_stream(sheet, settings, n)
        add("shards_min", n, "shards", "N (the open shards)")
        add(
            "shards_max",
            READABLE_SHARDS_FACTOR * n,
            "shards",
            "2N (a resharding's parents beside their children)",
        )
        return n
    wcu = add(
        "table_write_units",
        sum(view.table.write_units_per_second() for view in views),
        "WCU/s",
        "write_capacity (PROVISIONED) or peak_writes_per_second x ceil(average_item_kb)"
        + (", summed over streams:" if settings.several_streams else ""),
    )
    per_partition = add("write_units_per_partition", wcu / n, "WCU/s", "table_write_units / N")
    add("shards_min", n, "shards", "N (one open shard per partition)")
    add("shards_during_rollover", 2 * n, "shards", "2N (old and new shard both readable)")
    add("shards_max", 6 * n, "shards", "6N (24 h of 4 h rollovers still readable)")
    beyond = []
    if n > PARTITIONS_TO_TUNE:
        beyond.append(f"N = {n} partitions is more than {PARTITIONS_TO_TUNE}")
    if per_partition > WRITES_PER_PARTITION_TO_TUNE:
        beyond.append(f"{per_partition:.0f} WCU/s per partition is more than {WRITES_PER_PARTITION_TO_TUNE}")
    tuned = "max_leases_for_worker" in worker.model_fields_set
    if beyond:
        (sheet.notes if tuned else sheet.warnings).append(
            f"{' and '.join(beyond)}: past the point where the KCL defaults need tuning "
            f"(more than {PARTITIONS_TO_TUNE} partitions or {WRITES_PER_PARTITION_TO_TUNE} writes/s per "
            "partition); "
            + (
                "worker.max_leases_for_worker and the fleet are set: checked against the figures above"
                if tuned
                else "size max_leases_for_worker and the fleet from the figures above"
            )
        )
    return n


def _fleet(sheet: Sheet, settings: Settings, views: tuple[Settings, ...], n: int) -> tuple[float, float]:
    """The fleet for N partitions: instances recommended, worker processes M, threads and memory per
    worker, checked against the instance type. Returns M and the recommended instances."""
    add, worker, fleet = sheet.add, settings.worker, settings.fleet
    processes_per_instance = fleet.worker_processes_per_instance
    vcpu, memory_gib = INSTANCE_TYPES.get(fleet.instance_type, (2, 4.0))
    if processes_per_instance > vcpu:
        sheet.warnings.append(
            f"{processes_per_instance} worker processes on {fleet.instance_type} ({vcpu} vCPU): "
            "one process per core is the usual maximum"
        )
    readable = _readable_factor(settings)
    by_shards = math.ceil(readable * n / (fleet.max_shards_per_process * processes_per_instance))
    peak_writes = (
        settings.source.peak_records_per_second
        if settings.source.is_kinesis
        else sum(view.table.peak_writes_per_second for view in views)
    )
    by_records = math.ceil(peak_writes / (fleet.records_per_second_per_process * processes_per_instance))
    recommended = add(
        "recommended_instances",
        max(1, by_shards, by_records),
        "instances",
        f"max(1, ceil({readable}N / (max_shards_per_process x processes)), "
        "ceil(peak_writes / (records_per_second_per_process x processes)))",
    )
    if fleet.max_instances < recommended:
        sheet.warnings.append(
            f"fleet.max_instances {fleet.max_instances} < recommended {recommended:.0f} instances"
        )
    workers = add(
        "worker_processes_M",
        settings.total_worker_processes,
        "processes",
        "desired_instances x worker_processes_per_instance",
    )
    leases_per_worker = add(
        "leases_per_worker_peak", math.ceil(readable * n / workers), "leases", f"ceil({readable}N / M)"
    )
    add(
        "threads_per_worker",
        worker.max_worker_threads + 3,
        "threads",
        "max_worker_threads + 3 (renewer, taker, shard sync): not one per shard",
    )

    # With several streams, the largest read of any of them (a worker may hold any stream's shards).
    def read_kb(view: Settings) -> float:
        record_kb = (
            view.source.average_record_kb
            if view.source.is_kinesis
            else view.table.average_item_kb * IMAGES_PER_RECORD[view.table.stream_view_type]
        )
        return view.worker.records_per_read(view.source.max_records_per_read) * record_kb

    in_flight = min(leases_per_worker, worker.max_leases_for_worker)
    memory_mib = add(
        "memory_per_worker",
        max(read_kb(view) for view in views) * in_flight * 2 / 1024,
        "MiB",
        "records a read x record KB x leases held x 2 (raw bytes kept) / 1024; records a read = "
        "worker.max_records, else the stream's most (1000 from a table's, 10000 from Kinesis); record KB "
        "= source.average_record_kb (Kinesis), average_item_kb x images per record (a table's stream)",
    )
    if memory_mib * processes_per_instance > memory_gib * 1024 * 0.8:
        sheet.warnings.append(
            f"{processes_per_instance} workers x {memory_mib:.0f} MiB exceed 80% of {fleet.instance_type}'s "
            f"{memory_gib:g} GiB: lower max_records or choose a larger instance"
        )
    return workers, recommended


def _lease_caps(sheet: Sheet, settings: Settings, n: int, workers: float, recommended: float) -> None:
    """max_leases_for_worker's advised range for N and M, and what the configured cap and fleet size
    mean: the smallest fleet must hold every open shard, and a rollover's parents and children."""
    add, worker, fleet = sheet.add, settings.worker, settings.fleet
    processes_per_instance = fleet.worker_processes_per_instance
    low = add("max_leases_for_worker_min", math.ceil(n / workers), "leases", "ceil(N / M)")
    readable = _readable_factor(settings)
    high = add(
        "max_leases_for_worker_max", math.ceil(readable * n / workers), "leases", f"ceil({readable}N / M)"
    )
    suggested = add(
        "max_leases_for_worker_suggested",
        suggested_max_leases_for_worker(n, int(workers)),
        "leases",
        "ceil(N / M) + b with b = ceil(N / M): room for the 2N shards of a rollover",
    )
    smallest = max(1, fleet.min_instances) * processes_per_instance
    cap = worker.max_leases_for_worker
    if cap < UNBOUNDED:
        add(
            "leases_held_at_min_instances",
            cap * smallest,
            "leases",
            "max_leases_for_worker x min_instances x worker_processes_per_instance: the smallest fleet "
            "holds N to keep up and 2N through a rollover; a backlog of up to 6N shards is taken "
            "generation by generation (parents first), so 6N at once is not needed",
        )
    if cap < low:
        sheet.warnings.append(
            f"max_leases_for_worker {cap} < N/M = {low}: the fleet cannot hold every open shard"
        )
    elif cap * smallest < n:
        sheet.warnings.append(
            f"max_leases_for_worker {cap} x {smallest} worker processes at fleet.min_instances = {cap * smallest} "
            f"< N = {n}: the smallest fleet cannot hold every open shard"
        )
    elif cap * smallest < 2 * n:
        sheet.warnings.append(
            f"max_leases_for_worker {cap} x {smallest} worker processes at fleet.min_instances = {cap * smallest} "
            f"< 2N = {2 * n}: the smallest fleet cannot hold a rollover's parents and children, so every "
            f"rollover waits for the parents to finish; raise max_leases_for_worker to "
            f"{math.ceil(2 * n / smallest)} or fleet.min_instances"
        )
    elif high < cap < UNBOUNDED:
        sheet.notes.append(
            f"configured worker.max_leases_for_worker {cap} is above {readable}N/M = {high:.0f} (the advised range is "
            f"{low:.0f}..{high:.0f}, suggested {suggested:.0f}): it never limits a worker, as if unbounded"
        )
    if "desired_instances" in fleet.model_fields_set:
        if fleet.desired_instances < recommended:
            sheet.warnings.append(
                f"configured fleet.desired_instances {fleet.desired_instances} is fewer than the "
                f"{recommended:.0f} recommended (see recommended_instances): the fleet may fall behind"
            )
        elif fleet.desired_instances > max(recommended, fleet.min_instances):
            sheet.notes.append(
                f"configured fleet.desired_instances {fleet.desired_instances} is more than the "
                f"{recommended:.0f} recommended (see recommended_instances): headroom, and paid for"
            )


def _readable_factor(settings: Settings) -> int:
    """Readable shards per open shard: 6 for a DynamoDB stream (24 h of 4-hourly rollovers), 2 for a
    Kinesis stream (a resharding's parents and children)."""
    return READABLE_SHARDS_FACTOR if settings.source.is_kinesis else 6


def plan_inputs(settings: Settings) -> list[tuple[str, str]]:
    """The configured values the plan reads, so its advice can be compared with them (each
    stream's table with several)."""
    worker, fleet = settings.worker, settings.fleet

    def shown(value: object) -> str:
        return "unbounded" if value == UNBOUNDED else "—" if value is None else str(value)

    keys: list[tuple[str, object]] = []
    source = settings.source
    if source.is_kinesis:
        keys += [
            ("source.shard_count", source.shard_count),
            ("source.stream_mode", source.stream_mode if source.create else "as the stream is (imported)"),
            ("source.peak_records_per_second", source.peak_records_per_second),
            ("source.average_record_kb", source.average_record_kb),
            ("source.other_consumers", source.other_consumers),
            ("worker.idle_time_between_reads_millis", settings.worker.idle_time_between_reads_millis),
            ("worker.min_time_between_reads_millis", settings.worker.min_time_between_reads_millis),
        ]
    # A Kinesis source is sized from source:, not from table: (which it does not read).
    tables = [] if source.is_kinesis else list(zip(settings.table_keys(), settings.per_stream(), strict=True))
    for key, view in tables:
        table = view.table
        provisioned = table.billing_mode == "PROVISIONED"
        keys += [
            (f"{key}.billing_mode", table.billing_mode),
            (f"{key}.read_capacity", table.read_capacity if provisioned else None),
            (f"{key}.write_capacity", table.write_capacity if provisioned else None),
            (f"{key}.peak_writes_per_second", table.peak_writes_per_second),
            (f"{key}.peak_reads_per_second", table.peak_reads_per_second),
            (f"{key}.average_item_kb", table.average_item_kb),
            (f"{key}.storage_gb", table.storage_gb),
            (f"{key}.partitions", table.partitions),
            (f"{key}.stream_view_type", table.stream_view_type),
        ]
    keys += [
        ("fleet.instance_type", fleet.instance_type),
        ("fleet.desired_instances", fleet.desired_instances),
        ("fleet.max_instances", fleet.max_instances),
        ("fleet.worker_processes_per_instance", fleet.worker_processes_per_instance),
        ("fleet.records_per_second_per_process", fleet.records_per_second_per_process),
        ("fleet.max_shards_per_process", fleet.max_shards_per_process),
        ("worker.max_leases_for_worker", worker.max_leases_for_worker),
        ("worker.max_records", "the stream's most" if worker.max_records is None else worker.max_records),
        ("worker.failover_time_millis", worker.failover_time_millis),
        ("worker.lease_table_billing_mode", worker.lease_table_billing_mode),
        ("worker.initial_lease_table_read_capacity", worker.initial_lease_table_read_capacity),
        ("worker.initial_lease_table_write_capacity", worker.initial_lease_table_write_capacity),
    ]
    if settings.on_emulator:  # where N comes from on the emulator
        last = max(i for i, (key, _) in enumerate(keys) if key.endswith("table.partitions"))
        keys.insert(last + 1, ("emulator.partitions", settings.emulator.partitions))
    return [(key, shown(value)) for key, value in keys]

"""The metrics a fleet publishes, minute by minute, for the alarm evaluations of tests/infra.

What each worker process sends is the worker's own: the names, operations and which metrics also
go to the fleet series come from the catalogue (consumer/telemetry/metric_names.py), and the
counts follow the worker's timers (a full scan of the leases table at least every full-scan
interval and at every shard sync of the leader, one flush a minute). AWS's side: DynamoDB's Scan
``ReturnedItemCount`` is one datapoint per Scan *page* (1 MB of items; tests/functional checks the
paging on moto with the real store), and Auto Scaling's ``GroupInServiceInstances`` is the size.

A **healthy steady** fleet: every worker alive and caught up (lag a second, nothing trimmed, lost
or dead-lettered, no throttling, no ready shard left over; the lake's ``follow`` half its freshness
goal behind), the leases table holding the open
shards and the few finished ones waiting for cleanup, and a throughput the fleet's size is right
for (``consumer plan``'s sizing: ``ceil(records/s / (processes x records_per_second_per_process))``
is the size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from consumer.telemetry.metric_names import spec_for
from ground.settings import Settings
from infra.pipeline_follow import FRESHNESS_METRIC
from simulation.cloudwatch import Datapoints

DYNAMODB = "AWS/DynamoDB"
AUTOSCALING = "AWS/AutoScaling"
PAGE_BYTES = 1024 * 1024
# A lease item as the store writes it (key, owner, counter, checkpoint, parents): planning's figure.
LEASE_ITEM_BYTES = 300


@dataclass(frozen=True)
class FleetState:
    instances: int
    leases: int
    open_shards: int
    records_per_second: float
    ready_unassigned: int = 0


def steady_load(settings: Settings, instances: int) -> float:
    """A throughput for which ``instances`` is the size the plan calls for."""
    fleet = settings.fleet
    return (
        max(0.5, instances - 0.5) * fleet.worker_processes_per_instance * fleet.records_per_second_per_process
    )


def steady_leases(open_shards: int) -> int:
    """Open shards plus the finished parents waiting for cleanup, averaged over a period: a partition
    rolls over every ~4 h and its parent is cleaned up within minutes, so a few in a hundred at most."""
    return open_shards + open_shards // 20


def scan_pages(leases: int) -> list[int]:
    """ReturnedItemCount of each page of one full Scan of ``leases`` lease items."""
    per_page = PAGE_BYTES // LEASE_ITEM_BYTES
    pages = max(1, math.ceil(leases / per_page))
    return [min(per_page, leases - i * per_page) for i in range(pages)] if leases else [0]


def publish(
    settings: Settings,
    state: FleetState,
    group_name: str,
    minutes: int = 120,
    *,
    first_minute: int = 0,
    lake: bool = True,
) -> Datapoints:
    """Minutes ``first_minute`` to ``minutes`` of the fleet's metrics (a fresh deploy starts late);
    ``lake``: a ``follow`` reports the snapshot's freshness (none runs before its first release)."""
    data = Datapoints()
    namespace = settings.metrics_namespace
    worker = settings.worker
    processes = state.instances * settings.fleet.worker_processes_per_instance
    # Each worker scans the leases table in full at least every full-scan interval; the sync leader
    # once more at each shard sync (a minute's whole scans of each).
    own_scans = max(1, 60_000 // worker.full_scan_interval_millis)
    leader_scans = own_scans + max(1, 60_000 // worker.shard_sync_interval_millis)
    scans_per_minute = own_scans * (processes - 1) + leader_scans
    times = [minute * 60.0 + 30.0 for minute in range(first_minute, minutes)]

    def worker_metric(worker_id: str, name: str, value: float) -> None:
        """One datapoint a minute from this worker (and into the fleet series when the catalogue
        says the metric has one)."""
        spec = spec_for(name)
        assert spec is not None, name
        series = [(at, value) for at in times]
        data.extend(namespace, name, {"Operation": spec.operation, "WorkerIdentifier": worker_id}, series)
        if spec.fleet:
            data.extend(namespace, name, {"Operation": spec.operation}, series)

    for index in range(processes):
        worker_id = f"ip-10-0-0-{index // 4}-{index % 4}@host:1:abc"
        worker_metric(worker_id, "NumWorkers", processes)
        worker_metric(worker_id, "TotalLeases", state.leases)
        worker_metric(worker_id, "ReadyLeasesUnassigned", state.ready_unassigned)
        worker_metric(worker_id, "CurrentLeases", state.leases / processes)
        worker_metric(worker_id, "RecordsProcessed", state.records_per_second * 60 / processes)
        worker_metric(worker_id, "MillisBehindLatest", 800.0)
        worker_metric(worker_id, "LeaseTableScans", leader_scans if index == 0 else own_scans)
        if index == 0:  # the sync leader
            worker_metric(worker_id, "OpenShards", state.open_shards)
    pages = scan_pages(state.leases)
    leases_table = {"Operation": "Scan", "TableName": settings.leases_table_name}
    data.extend(
        DYNAMODB,
        "ReturnedItemCount",
        leases_table,
        [(at + scan * 0.1, count) for at in times for scan in range(scans_per_minute) for count in pages],
    )
    # The source table's writes: a record of the stream each (items of 1 KB or less).
    for view in settings.per_stream():
        source = {"TableName": view.table.source_table_name}
        data.extend(
            DYNAMODB,
            "ConsumedWriteCapacityUnits",
            source,
            [(at, state.records_per_second * 60) for at in times],
        )
    workers_table = {"Operation": "Scan", "TableName": settings.workers_table_name}
    data.extend(DYNAMODB, "ReturnedItemCount", workers_table, [(at, processes) for at in times])
    data.extend(
        AUTOSCALING,
        "GroupInServiceInstances",
        {"AutoScalingGroupName": group_name},
        [(at, state.instances) for at in times],
    )
    if lake:
        table = {"Table": settings.table.name}
        data.extend(
            namespace,
            FRESHNESS_METRIC,
            table,
            [(at, settings.pipeline.freshness_seconds / 2) for at in times],
        )
    return data


def worker_event(
    settings: Settings, data: Datapoints, name: str, minutes: list[int], value: float = 1.0
) -> None:
    """One worker publishes ``name`` (a catalogue metric) in each of ``minutes``, as the fleet does."""
    spec = spec_for(name)
    assert spec is not None, name
    points = [(minute * 60.0 + 45.0, value) for minute in minutes]
    worker = {"Operation": spec.operation, "WorkerIdentifier": "ip-10-0-0-9-1@host:1:abc"}
    data.extend(settings.metrics_namespace, name, worker, points)
    if spec.fleet:
        data.extend(settings.metrics_namespace, name, {"Operation": spec.operation}, points)

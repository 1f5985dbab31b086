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
from tests.infra.cloudwatch_model import Datapoints

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


def publish(settings: Settings, state: FleetState, group_name: str, minutes: int = 120) -> Datapoints:
    data = Datapoints()
    namespace = settings.metrics_namespace
    worker = settings.worker
    processes = state.instances * settings.fleet.worker_processes_per_instance
    # Each worker scans the leases table in full at least every full-scan interval; the sync leader
    # once more at each shard sync (a minute's whole scans of each).
    own_scans = max(1, 60_000 // worker.full_scan_interval_millis)
    leader_scans = own_scans + max(1, 60_000 // worker.shard_sync_interval_millis)
    scans_per_minute = own_scans * (processes - 1) + leader_scans

    def worker_metric(worker_id: str, name: str, at: float, value: float) -> None:
        spec = spec_for(name)
        assert spec is not None, name
        dims = {"Operation": spec.operation, "WorkerIdentifier": worker_id}
        data.add(namespace, name, dims, at, value)
        if spec.fleet:
            data.add(namespace, name, {"Operation": spec.operation}, at, value)

    for minute in range(minutes):
        at = minute * 60.0 + 30.0
        for index in range(processes):
            worker_id = f"ip-10-0-0-{index // 4}-{index % 4}@host:1:abc"
            worker_metric(worker_id, "NumWorkers", at, processes)
            worker_metric(worker_id, "TotalLeases", at, state.leases)
            worker_metric(worker_id, "ReadyLeasesUnassigned", at, state.ready_unassigned)
            worker_metric(worker_id, "CurrentLeases", at, state.leases / processes)
            worker_metric(worker_id, "RecordsProcessed", at, state.records_per_second * 60 / processes)
            worker_metric(worker_id, "MillisBehindLatest", at, 800.0)
            worker_metric(worker_id, "LeaseTableScans", at, leader_scans if index == 0 else own_scans)
            if index == 0:  # the sync leader
                worker_metric(worker_id, "OpenShards", at, state.open_shards)
        leases_table = {"Operation": "Scan", "TableName": settings.leases_table_name}
        for scan in range(scans_per_minute):
            for count in scan_pages(state.leases):
                data.add(DYNAMODB, "ReturnedItemCount", leases_table, at + scan * 0.1, count)
        workers_table = {"Operation": "Scan", "TableName": settings.workers_table_name}
        data.add(DYNAMODB, "ReturnedItemCount", workers_table, at, processes)
        data.add(
            AUTOSCALING, "GroupInServiceInstances", {"AutoScalingGroupName": group_name}, at, state.instances
        )
        lake = {"Table": settings.table.name}
        data.add(namespace, FRESHNESS_METRIC, lake, at, settings.pipeline.freshness_seconds / 2)
    return data

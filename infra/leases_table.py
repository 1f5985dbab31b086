"""The leases table, owned by infrastructure rather than created by the first worker.

The Java KCL creates its leases table at 10/10 provisioned capacity, which KCL users report is often
too low: a throttled leases table is how a fleet loses leases. Here the capacity is a deployed,
reviewed setting (``worker.initial_lease_table_*_capacity`` or on-demand), and a provisioned table
is always auto-scaled (:func:`capacity_bounds`), and the worker adopts the table because
``DynamoDBLeaseStore.ensure_table`` describes before it creates. The key schema is KCL's
(``leaseKey`` S), so a table written by KCL can be adopted too.

Beside it, the *workers table* (``workerId`` S) holds the workers' heartbeat rows and the first-start
marker, so that the leases table holds KCL leases only (docs/leases.md says why and what it costs).
It is always on-demand: its traffic is one write per worker process per renewal and one small scan
per worker per taker round, which grows with the fleet and never comes near the leases table's
capacity; provisioned at the leases table's figures (as it was), prod paid for 100 RCU + 100 WCU it
never used, and docs/deploy.md's cost table said on-demand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from ground.settings import Settings, WorkerSettings
from infra.scaling import expected_partitions


@dataclass(frozen=True)
class CapacityBounds:
    """Auto scaling of a provisioned leases table: each capacity between its floor and its ceiling."""

    read_floor: int
    read_ceiling: int
    write_floor: int
    write_ceiling: int


def capacity_bounds(settings: Settings) -> CapacityBounds | None:
    """How far the provisioned leases table may scale (None: on demand, nothing to scale).

    Floors: ``worker.initial_lease_table_*_capacity``. Ceilings: ``scaling.lease_table_max_capacity``
    when set; otherwise what `consumer plan` figures the table needs with the group at
    ``fleet.max_instances`` (``lease_table_read_units``: scans; ``lease_table_write_units_catching_up``:
    heartbeats and every shard checkpointing at its catch-up read rate, as after an outage or a load
    spike), plus, for writes, a rollover's burst (a child lease created and a parent's last checkpoint
    for each of the N partitions), at the target utilization. A fixed capacity is sized for a steady
    fleet: prod's 100 WCU leave no room for the ~88 a rollover of its 44 partitions asks on top of its
    checkpoints, and a ceiling sized for one checkpoint a second per shard throttles a fleet catching
    up after a tenfold load.
    """
    worker, scaling = settings.worker, settings.scaling
    if worker.lease_table_billing_mode != "PROVISIONED":
        return None
    read_floor, write_floor = (
        worker.initial_lease_table_read_capacity,
        worker.initial_lease_table_write_capacity,
    )
    if scaling.lease_table_max_capacity is not None:
        ceiling = scaling.lease_table_max_capacity
        return CapacityBounds(read_floor, max(read_floor, ceiling), write_floor, max(write_floor, ceiling))
    from tools.planning import make_plan

    fleet = settings.fleet.model_copy(update={"desired_instances": settings.fleet.max_instances})
    plan = make_plan(settings.model_copy(update={"fleet": fleet}))
    n = expected_partitions(settings)
    target = scaling.lease_table_target_utilization_percent / 100
    reads = math.ceil(plan.value("lease_table_read_units") / target)
    writes = math.ceil((plan.value("lease_table_write_units_catching_up") + 2 * n) / target)
    return CapacityBounds(read_floor, max(read_floor, reads), write_floor, max(write_floor, writes))


class LeasesTable(Construct):
    """``table``: the leases table named ``name``, with the worker's capacity settings;
    ``workers_table``: the heartbeat table named ``workers_name``, on-demand."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        workers_name: str,
        settings: WorkerSettings,
        protect: bool,
        bounds: CapacityBounds | None,
        target_utilization_percent: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.table = self._table("Table", name, "leaseKey", settings, protect, on_demand=False)
        self.workers_table = self._table(
            "Workers", workers_name, "workerId", settings, protect, on_demand=True
        )
        if bounds is not None:
            for scaling, floor, ceiling in (
                (self.table.auto_scale_read_capacity, bounds.read_floor, bounds.read_ceiling),
                (self.table.auto_scale_write_capacity, bounds.write_floor, bounds.write_ceiling),
            ):
                capacity = scaling(min_capacity=floor, max_capacity=ceiling)
                capacity.scale_on_utilization(target_utilization_percent=target_utilization_percent)

    def _table(
        self,
        construct_id: str,
        name: str,
        key: str,
        settings: WorkerSettings,
        protect: bool,
        *,
        on_demand: bool,
    ) -> dynamodb.Table:
        return dynamodb.Table(
            self,
            construct_id,
            table_name=name,
            partition_key=dynamodb.Attribute(name=key, type=dynamodb.AttributeType.STRING),
            **fleet_table_conventions(settings, protect, on_demand=on_demand),
        )


def fleet_table_conventions(
    settings: WorkerSettings, protect: bool, *, on_demand: bool = False
) -> dict[str, Any]:
    """What every table of the fleet's own state shares (leases, workers, window state): the leases
    table's billing and capacity settings (``on_demand``: PAY_PER_REQUEST whatever they say),
    AWS-managed encryption, point-in-time recovery (checkpoints are the fleet's only memory of where
    it is: recoverable to the second), and deletion protection with retention where the environment
    protects its data."""
    provisioned = settings.lease_table_billing_mode == "PROVISIONED" and not on_demand
    return {
        "billing_mode": dynamodb.BillingMode.PROVISIONED
        if provisioned
        else dynamodb.BillingMode.PAY_PER_REQUEST,
        "read_capacity": settings.initial_lease_table_read_capacity if provisioned else None,
        "write_capacity": settings.initial_lease_table_write_capacity if provisioned else None,
        "point_in_time_recovery_specification": dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        "encryption": dynamodb.TableEncryption.AWS_MANAGED,
        "deletion_protection": protect,
        "removal_policy": RemovalPolicy.RETAIN if protect else RemovalPolicy.DESTROY,
    }

"""The leases table, owned by infrastructure rather than created by the first worker.

The Java KCL creates its leases table at 10/10 provisioned capacity, which KCL users report is often
too low: a throttled leases table is how a fleet loses leases. Here the capacity is a deployed,
reviewed setting (``worker.initial_lease_table_*_capacity`` or on-demand), optionally auto-scaled,
and the worker adopts the table because ``DynamoDBLeaseStore.ensure_table`` describes before it
creates. The key schema is KCL's (``leaseKey`` S), so a table written by KCL can be adopted too.

Beside it, the *workers table* (``workerId`` S) holds the workers' heartbeat rows and the first-start
marker, so that the leases table holds KCL leases only (docs/leases.md says why and what it costs).
It is always on-demand: its traffic is one write per worker process per renewal and one small scan
per worker per taker round, which grows with the fleet and never comes near the leases table's
capacity; provisioned at the leases table's figures (as it was), prod paid for 100 RCU + 100 WCU it
never used, and docs/deploy.md's cost table said on-demand.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from ground.settings import WorkerSettings


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
        auto_scale_max_capacity: int | None,
        target_utilization_percent: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.table = self._table("Table", name, "leaseKey", settings, protect, on_demand=False)
        self.workers_table = self._table(
            "Workers", workers_name, "workerId", settings, protect, on_demand=True
        )
        provisioned = settings.lease_table_billing_mode == "PROVISIONED"
        if provisioned and auto_scale_max_capacity is not None:
            for table in (self.table,):
                for scaling, floor in (
                    (table.auto_scale_read_capacity, settings.initial_lease_table_read_capacity),
                    (table.auto_scale_write_capacity, settings.initial_lease_table_write_capacity),
                ):
                    capacity = scaling(min_capacity=floor, max_capacity=max(floor, auto_scale_max_capacity))
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

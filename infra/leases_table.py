"""The leases table, owned by infrastructure rather than created by the first worker.

The Java KCL creates its leases table at 10/10 provisioned capacity, which KCL users report is often
too low: a throttled leases table is how a fleet loses leases. Here the capacity is a deployed,
reviewed setting (``worker.initial_lease_table_*_capacity`` or on-demand), optionally auto-scaled,
and the worker adopts the table because ``DynamoDBLeaseStore.ensure_table`` describes before it
creates. The key schema is KCL's (``leaseKey`` S), so a table written by KCL can be adopted too.

Beside it, the *workers table* (``workerId`` S) holds the workers' heartbeat rows and the first-start
marker, so that the leases table holds KCL leases only (docs/leases.md says why and what it costs).
It gets the same billing mode and capacity settings: one write per worker process per renewal and one
small scan per worker per taker round.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from ground.settings import WorkerSettings


class LeasesTable(Construct):
    """``table``: the leases table named ``name``; ``workers_table``: the heartbeat table named
    ``workers_name``; both with the worker's capacity settings."""

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
        self.table = self._table("Table", name, "leaseKey", settings, protect)
        self.workers_table = self._table("Workers", workers_name, "workerId", settings, protect)
        provisioned = settings.lease_table_billing_mode == "PROVISIONED"
        if provisioned and auto_scale_max_capacity is not None:
            for table in (self.table, self.workers_table):
                for scaling, floor in (
                    (table.auto_scale_read_capacity, settings.initial_lease_table_read_capacity),
                    (table.auto_scale_write_capacity, settings.initial_lease_table_write_capacity),
                ):
                    capacity = scaling(min_capacity=floor, max_capacity=max(floor, auto_scale_max_capacity))
                    capacity.scale_on_utilization(target_utilization_percent=target_utilization_percent)

    def _table(
        self, construct_id: str, name: str, key: str, settings: WorkerSettings, protect: bool
    ) -> dynamodb.Table:
        return dynamodb.Table(
            self,
            construct_id,
            table_name=name,
            partition_key=dynamodb.Attribute(name=key, type=dynamodb.AttributeType.STRING),
            **fleet_table_conventions(settings, protect),
        )


def fleet_table_conventions(settings: WorkerSettings, protect: bool) -> dict[str, Any]:
    """What every table of the fleet's own state shares (leases, workers, window state): the leases
    table's billing and capacity settings, AWS-managed encryption, point-in-time recovery (checkpoints
    are the fleet's only memory of where it is: recoverable to the second), and deletion protection
    with retention where the environment protects its data."""
    provisioned = settings.lease_table_billing_mode == "PROVISIONED"
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

"""The fleet's scaling rules as plain data (no CDK import): metrics, expressions, thresholds.

:mod:`infra.monitoring` builds the alarms from :func:`scaling_rules`, and tests/infra evaluates the
expressions the synthesized template carries over the metrics of a fleet, so both read one source.

**Leases, whatever the pages.** The seed's figure is the leases table's Scan ReturnedItemCount. DynamoDB
publishes one datapoint per Scan *request*, and a Scan request returns at most 1 MB: once the table
is more than one page (about 3 500 leases), the Average per request is a page's share, not the lease
count. Every worker counts its complete scans of the leases table (``LeaseTableScans``, one fleet
series), so ``leases = Sum(ReturnedItemCount) / Sum(LeaseTableScans)`` is the number of leases for a
table of any size and a fleet of any size (each complete scan returns every lease once).

**N as the stream has it.** The sync leader publishes the open shards of its last listing
(``OpenShards``, one per partition); the configured estimate (``table.expected_partitions``) fills
in only until the first listing is published. So an imported table with more partitions than its
capacity suggests scales on its real N.

**Scale-out is the seed's rule exactly**: ``leases / N >= multiplier`` (2N) over one period adds one
instance. **Scale-in** removes one only when the fleet without it would still be fine: above the
group's minimum, caught up (``leases <= scale_in_multiplier x N``), the throughput within
``scale_in_max_utilization`` of what one instance fewer plans for
(``fleet.records_per_second_per_process``), and one instance fewer still able to hold
``multiplier x N`` leases (every worker at ``worker.max_leases_for_worker``): every lease that exists
now (at most ``scale_in_multiplier x N``) with the headroom of a whole rollover, up to the line where
scale-out would add the instance back. A fleet at the size its load calls for therefore never scales
in, a scale-out (taken when leases reached 2N, far from caught up) is never undone at once, and a
fleet whose load went back to rest returns to ``min_instances`` whenever the minimum can hold 2N.

Not the 6N shards `consumer plan` sizes the *readable* backlog for (24 h of rollovers): only one
generation per partition is ready at a time (the rest wait for their parents and are balanced
apart), and a backlog shows as leases rising to 2N, which scales out. Held to 6N, prod (N = 44, 4
processes of 11 leases) could never go below 6 instances, and a scale-out from its minimum of 3
would be permanent.

**Group at its maximum** pages only when scale-out wants more and can add none: at the maximum and
at 2N for three periods. A fleet steady at its maximum is healthy.
"""

from __future__ import annotations

from dataclasses import dataclass

from ground.settings import UNBOUNDED, Settings

DYNAMODB_NAMESPACE = "AWS/DynamoDB"
AUTOSCALING_NAMESPACE = "AWS/AutoScaling"
# The group at its maximum and still at 2N for this many periods pages (scale-out can add nothing).
AT_MAX_PERIODS = 3


@dataclass(frozen=True)
class MetricRef:
    """One metric an expression reads: ``id`` in the expression, CloudWatch's name and statistic."""

    id: str
    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    statistic: str


@dataclass(frozen=True)
class ScalingRules:
    """What the scaling alarms compute, for one environment."""

    multiplier: float
    scale_in_multiplier: float
    configured_n: int
    min_instances: int
    max_instances: int
    processes: int
    records_per_process: float
    leases_per_process: int
    scale_in_max_utilization: float
    period_seconds: int
    scale_in_periods: int
    metrics: tuple[MetricRef, ...]

    @property
    def leases(self) -> str:
        return "(items / scans)"

    @property
    def n(self) -> str:
        return f"FILL(FILL(openShards, REPEAT), {self.configured_n})"

    @property
    def scale_out_expression(self) -> str:
        """Leases per open shard: the seed's "ReturnedItemCount >= 2N" is this >= multiplier."""
        return f"{self.leases} / {self.n}"

    @property
    def scale_in_expression(self) -> str:
        """1 while one instance fewer would do (module docstring), else 0."""
        fewer = "(instances - 1)"
        throughput = f"FILL(records, 0) / {self.period_seconds}"
        return (
            f"IF(instances > {self.min_instances}"
            f" AND {self.leases} <= {self.scale_in_multiplier:g} * {self.n}"
            f" AND {throughput} <= {self.scale_in_max_utilization:g} * {fewer} * "
            f"{self.processes * self.records_per_process:g}"
            f" AND {fewer} * {self.processes * self.leases_per_process} >= "
            f"{self.multiplier:g} * {self.n}, 1, 0)"
        )

    @property
    def at_max_expression(self) -> str:
        """1 while the group is at its maximum and leases are still at multiplier x N."""
        return f"IF(instances >= {self.max_instances} AND {self.scale_out_expression} >= {self.multiplier:g}, 1, 0)"

    def metric(self, metric_id: str) -> MetricRef:
        return next(m for m in self.metrics if m.id == metric_id)


def expected_partitions(settings: Settings) -> int:
    """The configured estimate of N until OpenShards is published: a Kinesis stream's
    source.shard_count, else the table's (settings.table.expected_partitions)."""
    if settings.source.is_kinesis:
        return settings.source.shard_count
    return settings.table.expected_partitions()[0]


def leases_per_process(settings: Settings) -> int:
    """What one worker process may hold: max_leases_for_worker, or the planning figure when unbounded."""
    cap = settings.worker.max_leases_for_worker
    planned = settings.fleet.max_shards_per_process
    return planned if cap == UNBOUNDED else min(cap, planned)


def scaling_rules(settings: Settings, group_name: str) -> ScalingRules:
    scaling, fleet = settings.scaling, settings.fleet
    namespace = settings.metrics_namespace
    return ScalingRules(
        multiplier=scaling.returned_item_count_multiplier,
        scale_in_multiplier=scaling.scale_in_multiplier,
        configured_n=expected_partitions(settings),
        min_instances=fleet.min_instances,
        max_instances=fleet.max_instances,
        processes=fleet.worker_processes_per_instance,
        records_per_process=fleet.records_per_second_per_process,
        leases_per_process=leases_per_process(settings),
        scale_in_max_utilization=scaling.scale_in_max_utilization,
        period_seconds=scaling.period_seconds,
        scale_in_periods=scaling.scale_in_evaluation_periods,
        metrics=(
            MetricRef(
                "items",
                DYNAMODB_NAMESPACE,
                "ReturnedItemCount",
                (("Operation", "Scan"), ("TableName", settings.leases_table_name)),
                "Sum",
            ),
            MetricRef("scans", namespace, "LeaseTableScans", (("Operation", "LeaseTable"),), "Sum"),
            MetricRef("openShards", namespace, "OpenShards", (("Operation", "ShardSyncTask"),), "Maximum"),
            MetricRef("records", namespace, "RecordsProcessed", (("Operation", "ProcessTask"),), "Sum"),
            MetricRef(
                "instances",
                AUTOSCALING_NAMESPACE,
                "GroupInServiceInstances",
                (("AutoScalingGroupName", group_name),),
                "Maximum",
            ),
        ),
    )


@dataclass(frozen=True)
class ScalingThresholds:
    """The configured 2N line the dashboards draw (N from the configuration: the dashboards' reference)."""

    scale_out_at: float
    scale_in_at: float


def scaling_thresholds(settings: Settings) -> ScalingThresholds:
    n = expected_partitions(settings)
    scaling = settings.scaling
    return ScalingThresholds(
        scale_out_at=scaling.returned_item_count_multiplier * n, scale_in_at=scaling.scale_in_multiplier * n
    )

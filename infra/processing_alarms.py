"""Alarm parts the monitoring construct assembles: the processing-stopped alarm's metrics (source
writes and records processed), the stalled-shards query grouped by shard, and the metrics the
scaling rules and the leases table's throttle alarm read."""

from __future__ import annotations

import re

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from ground.settings import Settings
from infra.scaling import ScalingRules
from infra.widgets import DYNAMODB_NAMESPACE, KINESIS_NAMESPACE

# Records written to the source (the table, or the Kinesis stream) and none processed, every minute of
# five in a row. (A minute with writes and no processing happens at rest too: a write late in a minute
# is read in the next.)
STOPPED_MINUTES = 5
STOPPED_EXPRESSION = "IF(FILL(writes, 0) > 0 AND FILL(processed, 0) < 1, 1, 0)"


def stalled_shards_query(settings: Settings) -> str:
    """StalledShards per shard (the workers publish it under [Operation, ShardId] too): a
    multi-time-series alarm whose contributors, and so its notifications, are the stalled shards."""
    return (
        f'SELECT SUM(StalledShards) FROM SCHEMA("{settings.metrics_namespace}", Operation, ShardId) '
        "WHERE Operation = 'ProcessTask' GROUP BY ShardId"
    )


def processing_stopped(
    settings: Settings, prefix: str, streams: list[str]
) -> list[tuple[str, str, str, cloudwatch.Metric, cloudwatch.Metric]]:
    """(construct id, name, description, records processed, source-table writes) of each
    processing-stopped alarm: the fleet's, or each stream's with several streams."""
    period = Duration.seconds(60)

    def metric(namespace: str, name: str, dimensions: dict[str, str]) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=namespace,
            metric_name=name,
            dimensions_map=dimensions,
            statistic="Sum",
            period=period,
        )

    what = (
        f"in {STOPPED_MINUTES} minutes in a row: no worker processes (all fenced by failing tables, "
        "crashed, without leases, or a deploy that handed over to workers that cannot take them). "
        "See workers-silent, lease-tables-failing, leases-table-throttled and the group's activity."
    )
    if settings.source.is_kinesis:
        name = settings.source.kinesis_stream_name
        return [
            (
                "ProcessingStopped",
                f"{prefix}-processing-stopped",
                f"The Kinesis stream {name} was written to and the fleet processed no record {what}",
                metric(settings.metrics_namespace, "RecordsProcessed", {"Operation": "ProcessTask"}),
                metric(KINESIS_NAMESPACE, "IncomingRecords", {"StreamName": name}),
            )
        ]
    if not streams:
        return [
            (
                "ProcessingStopped",
                f"{prefix}-processing-stopped",
                f"The source table {settings.table.source_table_name} was written to and the fleet "
                f"processed no record {what}",
                metric(settings.metrics_namespace, "RecordsProcessed", {"Operation": "ProcessTask"}),
                metric(
                    DYNAMODB_NAMESPACE,
                    "ConsumedWriteCapacityUnits",
                    {"TableName": settings.table.source_table_name},
                ),
            )
        ]
    return [
        (
            f"{re.sub(r'[^A-Za-z0-9]', '', table)}ProcessingStopped",
            f"{prefix}-{table}-processing-stopped",
            f"Stream {table}: its table was written to and the fleet processed none of its records {what}",
            metric(
                settings.metrics_namespace,
                "RecordsProcessed",
                {"Operation": "ProcessTask", "Stream": table},
            ),
            metric(DYNAMODB_NAMESPACE, "ConsumedWriteCapacityUnits", {"TableName": table}),
        )
        for table in streams
    ]


def scaling_expression(rules: ScalingRules, expression: str, label: str) -> cloudwatch.MathExpression:
    """One of the scaling rules' expressions over the metrics they name (infra/scaling.py)."""
    period = Duration.seconds(rules.period_seconds)
    return cloudwatch.MathExpression(
        expression=expression,
        using_metrics={
            m.id: cloudwatch.Metric(
                namespace=m.namespace,
                metric_name=m.name,
                dimensions_map=dict(m.dimensions),
                statistic=m.statistic,
                period=period,
            )
            for m in rules.metrics
            if re.search(rf"\b{m.id}\b", expression)
        },
        label=label,
        period=period,
    )


def table_metric(table: str, name: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=DYNAMODB_NAMESPACE,
        metric_name=name,
        dimensions_map={"TableName": table},
        statistic="Sum",
        period=Duration.seconds(60),
    )

"""What the dashboard and the alarms add for each stream when one fleet serves several
(``streams:``): the stream's own alarms and its row of the dashboard, read from the ``Stream``
dimension the workers publish then (consumer/telemetry/metrics.py).

The fleet-wide alarms and panels stay as they are (their series add every stream up); these
say which table is behind, losing records or dead-lettering.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from ground.settings import Settings

# As infra/monitoring.py's LIVENESS_PERIOD_SECONDS: lag is only published with records.
LAG_PERIOD_SECONDS = 300


def insights(settings: Settings, function: str, name: str, operation: str, stream: str | None = None) -> str:
    """A Metrics Insights query over every worker's EMF metric (alarms cannot use SEARCH); with
    ``stream``, over that stream's series only."""
    if stream is None:
        return (
            f'SELECT {function}({name}) FROM SCHEMA("{settings.metrics_namespace}", Operation, WorkerIdentifier) '
            f"WHERE Operation = '{operation}'"
        )
    return (
        f'SELECT {function}({name}) FROM SCHEMA("{settings.metrics_namespace}", Operation, Stream, '
        f"WorkerIdentifier) WHERE Operation = '{operation}' AND Stream = '{stream}'"
    )


@dataclass(frozen=True)
class StreamAlarm:
    construct_id: str
    name: str
    description: str
    query: str
    threshold: float
    period_seconds: int = 60

    @property
    def arguments(self) -> tuple[str, str, str, str, float]:
        return (self.construct_id, self.name, self.description, self.query, self.threshold)


def stream_alarms(settings: Settings, prefix: str, table: str) -> list[StreamAlarm]:
    """One stream's alarms: its lag, its records lost to trimming and its dead letters, each over
    that stream's series, so the page names the table."""
    key = re.sub(r"[^A-Za-z0-9]", "", table)
    lag_millis = settings.scaling.lag_alarm_millis_over(settings.source.stream_retention_hours)
    return [
        StreamAlarm(
            f"{key}LagNearRetention",
            f"{prefix}-{table}-lag-near-retention",
            f"Stream {table}: MillisBehindLatest >= {lag_millis / 3_600_000:g} h: its records are trimmed "
            "after 24 h.",
            insights(settings, "MAX", "MillisBehindLatest", "ProcessTask", table),
            lag_millis,
            LAG_PERIOD_SECONDS,
        ),
        StreamAlarm(
            f"{key}RecordsLostToTrimming",
            f"{prefix}-{table}-records-lost-to-trimming",
            f"Stream {table}: records were trimmed before they were processed: data was lost.",
            insights(settings, "SUM", "RecordsTrimmedLost", "Fetcher", table),
            1,
        ),
        StreamAlarm(
            f"{key}DeadLetters",
            f"{prefix}-{table}-dead-letters",
            f"Stream {table}: records were sent to its dead-letter destination: inspect and replay them.",
            insights(settings, "SUM", "RecordsSentToDeadLetter", "ProcessTask", table),
            1,
        ),
    ]


def stream_row(settings: Settings, table: str) -> cloudwatch.GraphWidget:
    """One stream's row of the dashboard: its records processed and its lag, over the workers."""
    period = Duration.seconds(60)

    def line(function: str, name: str, label: str) -> cloudwatch.MathExpression:
        return cloudwatch.MathExpression(
            expression=insights(settings, function, name, "ProcessTask", table),
            using_metrics={},
            label=label,
            period=period,
        )

    return cloudwatch.GraphWidget(
        title=f"Stream {table}: records processed and lag",
        left=[line("SUM", "RecordsProcessed", "records processed")],
        right=[line("MAX", "MillisBehindLatest", "millis behind latest")],
        width=24,
    )

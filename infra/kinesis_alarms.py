"""The alarms a Kinesis source adds (``source.kind: kinesis``), on the stream's own AWS/Kinesis
metrics (stream-level, dimension StreamName: every consumer's reads, published whether or not a
worker runs):

* **iterator age** (``GetRecords.IteratorAgeMilliseconds``) at the lag alarm's threshold, a quarter
  of the stream's retention by default: the oldest read of any consumer is that far behind, and
  unread records are trimmed at the retention. Beside the workers' own lag alarm (their
  MillisBehindLatest), it sees a fleet that stopped reading, and another consumer falling behind.
* **read throttles** (``ReadProvisionedThroughputExceeded``) in 3 of 5 minutes: without enhanced
  fan-out every consumer shares each shard's 5 GetRecords calls/s and 2 MiB/s. A throttled read is
  retried and loses nothing, so one throttled minute is no news; a lasting one is shards falling
  behind.

The processing-stopped alarm reads the stream's IncomingRecords instead of the table's writes
(infra/processing_alarms.py); the scale-out alarm (leases >= 2N) is the same for both sources.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from ground.settings import Settings
from infra.widgets import KINESIS_NAMESPACE

# As infra/monitoring.py's: five-minute periods for a gauge, 3 of 5 minutes for what must last.
AGE_PERIOD_SECONDS = 300
PERSIST_PERIODS, PERSIST_DATAPOINTS = 5, 3


def stream_metric(
    settings: Settings, name: str, statistic: str, period_seconds: int = 60
) -> cloudwatch.Metric:
    """One of the Kinesis source stream's own metrics."""
    return cloudwatch.Metric(
        namespace=KINESIS_NAMESPACE,
        metric_name=name,
        dimensions_map={"StreamName": settings.source.kinesis_stream_name},
        statistic=statistic,
        period=Duration.seconds(period_seconds),
    )


@dataclass(frozen=True)
class KinesisAlarm:
    construct_id: str
    name: str
    description: str
    metric: cloudwatch.Metric
    threshold: float
    evaluation_periods: int = 1
    datapoints_to_alarm: int | None = None

    def build(self, alarm: Callable[..., cloudwatch.Alarm]) -> cloudwatch.Alarm:
        """The alarm, made by the monitoring construct's ``alarm`` (its defaults for the rest)."""
        return alarm(
            self.construct_id,
            self.name,
            self.description,
            self.metric,
            self.threshold,
            evaluation_periods=self.evaluation_periods,
            datapoints_to_alarm=self.datapoints_to_alarm,
        )


def kinesis_alarms(settings: Settings, prefix: str) -> list[KinesisAlarm]:
    """The stream's alarms (none for a DynamoDB source)."""
    if not settings.source.is_kinesis:
        return []
    name = settings.source.kinesis_stream_name
    hours = settings.source.stream_retention_hours
    lag_millis = settings.scaling.lag_alarm_millis_over(hours)
    return [
        KinesisAlarm(
            "StreamIteratorAgeNearRetention",
            f"{prefix}-stream-iterator-age-near-retention",
            f"Kinesis {name}: GetRecords.IteratorAgeMilliseconds >= {lag_millis / 3_600_000:g} h "
            f"({settings.scaling.lag_alarm_retention_fraction:.0%} of its {hours} h retention): the oldest "
            f"read of a consumer of the stream is that far behind; unread records are trimmed after "
            f"{hours} h. With lag-near-retention quiet, the consumer behind is not this fleet.",
            stream_metric(settings, "GetRecords.IteratorAgeMilliseconds", "Maximum", AGE_PERIOD_SECONDS),
            lag_millis,
        ),
        KinesisAlarm(
            "StreamReadsThrottled",
            f"{prefix}-stream-reads-throttled",
            f"Kinesis {name}: GetRecords calls throttled (ReadProvisionedThroughputExceeded) in 3 of 5 "
            "minutes: the stream's consumers ask more than 5 reads/s or 2 MiB/s of a shard. Reads are "
            "retried and lose nothing, but shards fall behind: fewer consumers, a longer "
            "worker.idle_time_between_reads_millis, more shards, or enhanced fan-out for the others.",
            stream_metric(settings, "ReadProvisionedThroughputExceeded", "Sum"),
            1,
            evaluation_periods=PERSIST_PERIODS,
            datapoints_to_alarm=PERSIST_DATAPOINTS,
        ),
    ]

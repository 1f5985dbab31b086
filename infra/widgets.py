"""The CloudWatch dashboard's widgets as plain data (no CDK import), resolved for one environment.

Seed 003's dashboard is the operator's view of a fleet: is it keeping up (records processed vs table
writes, MillisBehindLatest), is it sized right (leases vs 2N, leases per worker), is the leases
table healthy (consumed vs provisioned capacity, throttles), and is anything being lost (retries,
dead letters, records trimmed before they were read). The CDK dashboard renders this list; the
local dashboard (``consumer dashboard``) can import :func:`dashboard_widgets` and draw the same
panels from the same definitions, so what a developer sees locally is what an operator sees.

Shape (all frozen dataclasses):

* :class:`WidgetSpec` -- ``title``, ``unit``, ``y_label``, ``metrics`` (tuple of :class:`MetricSpec`),
  ``lines`` (tuple of :class:`ReferenceLine`: horizontal lines such as 2N).
* :class:`MetricSpec` -- ``namespace``, ``name``, ``dimensions`` (sorted tuple of (name, value)),
  ``statistic`` (CloudWatch statistic over one period), ``label``, ``per`` (``None`` for one line, or a
  dimension name -- ``WorkerIdentifier`` / ``InstanceId`` -- to draw one line per value of it, for which
  CloudWatch needs a SEARCH expression), ``total`` (sum the lines of every worker into one),
  ``per_second`` (a rate: the period's Sum divided by the period, with zero for a period without
  data points, so that a counter reads the same whatever the dashboard's period -- 60 s here, 5 s
  in ``consumer dashboard`` -- and a quiet period shows as zero instead of a line across it; it is
  also how DynamoDB capacity is compared with the provisioned per-second figure).

Every counter on the dashboard is a rate per second, as in the local dashboard
(``consumer/telemetry/dashboard.py``); gauges (leases, lag, CPU, memory) are drawn as published.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from consumer.settings import Settings
from infra import scaling

Statistic = Literal["Sum", "Average", "Maximum", "Minimum", "SampleCount"]

DYNAMODB_NAMESPACE = "AWS/DynamoDB"
# The worker's EMF metrics always carry these two dimensions (docs/design.md, Telemetry).
WORKER_DIMENSIONS = ("Operation", "WorkerIdentifier")


@dataclass(frozen=True)
class MetricSpec:
    namespace: str
    name: str
    statistic: Statistic
    label: str
    dimensions: tuple[tuple[str, str], ...] = ()
    per: str | None = None
    total: bool = False
    per_second: bool = False

    def search_expression(self, period_seconds: int) -> str:
        """The CloudWatch SEARCH that finds every line of a per-worker / per-instance metric.

        The schema lists every dimension the metric carries, so the search matches exactly the
        metric the worker (or agent) publishes and not its other dimension sets.
        """
        keys = sorted({name for name, _ in self.dimensions} | ({self.per} if self.per else set()))
        schema = ",".join([f'"{self.namespace}"', *keys])
        terms = [f'MetricName="{self.name}"', *(f'{k}="{v}"' for k, v in self.dimensions)]
        return f"SEARCH('{{{schema}}} {' '.join(terms)}', '{self.statistic}', {period_seconds})"


@dataclass(frozen=True)
class ReferenceLine:
    label: str
    value: float


@dataclass(frozen=True)
class WidgetSpec:
    title: str
    unit: str
    y_label: str
    metrics: tuple[MetricSpec, ...]
    lines: tuple[ReferenceLine, ...] = field(default=())


def _worker_metric(
    settings: Settings,
    operation: str,
    name: str,
    statistic: Statistic,
    label: str,
    *,
    total: bool,
    per_second: bool = False,
) -> MetricSpec:
    return MetricSpec(
        namespace=settings.metrics_namespace,
        name=name,
        statistic=statistic,
        label=label,
        dimensions=(("Operation", operation),),
        per="WorkerIdentifier",
        total=total,
        per_second=per_second,
    )


def _worker_rate(settings: Settings, operation: str, name: str, label: str) -> MetricSpec:
    """A worker counter summed over the fleet, as a rate per second."""
    return _worker_metric(settings, operation, name, "Sum", label, total=True, per_second=True)


def _table_metric(
    table: str, name: str, statistic: Statistic, label: str, *, per_second: bool = False
) -> MetricSpec:
    return MetricSpec(
        DYNAMODB_NAMESPACE, name, statistic, label, (("TableName", table),), per_second=per_second
    )


def _instance_metric(settings: Settings, name: str, label: str) -> MetricSpec:
    # The CloudWatch agent publishes these under the application's namespace, rolled up per instance.
    return MetricSpec(settings.metrics_namespace, name, "Average", label, per="InstanceId")


def expected_partitions(settings: Settings) -> int:
    """N, the table's expected partition count (:func:`infra.scaling.expected_partitions`)."""
    return scaling.expected_partitions(settings)


def scale_out_threshold(settings: Settings) -> float:
    """The scale-out alarm's threshold: multiplier x N (2N by default), as :mod:`infra.scaling` sets it."""
    return scaling.scaling_thresholds(settings).scale_out_at


def dashboard_widgets(settings: Settings) -> tuple[WidgetSpec, ...]:
    """Every widget of the dashboard, with names, dimensions and thresholds resolved for ``settings``."""
    n = expected_partitions(settings)
    leases_table = settings.leases_table_name
    source_table = settings.table.existing_table_name or settings.table.name
    multiplier = settings.scaling.returned_item_count_multiplier
    leases_lines: list[ReferenceLine] = [
        ReferenceLine(
            f"{multiplier:g}N = {scale_out_threshold(settings):g} (scale out)", scale_out_threshold(settings)
        ),
        ReferenceLine(f"N = {n}", float(n)),
    ]
    capacity: list[MetricSpec] = [
        _table_metric(leases_table, "ConsumedReadCapacityUnits", "Sum", "consumed RCU/s", per_second=True),
        _table_metric(leases_table, "ConsumedWriteCapacityUnits", "Sum", "consumed WCU/s", per_second=True),
    ]
    if settings.worker.lease_table_billing_mode == "PROVISIONED":
        capacity += [
            _table_metric(leases_table, "ProvisionedReadCapacityUnits", "Average", "provisioned RCU"),
            _table_metric(leases_table, "ProvisionedWriteCapacityUnits", "Average", "provisioned WCU"),
        ]
    return (
        WidgetSpec(
            "Records processed vs table writes",
            "Count/Second",
            "records/s",
            (
                _worker_rate(settings, "ProcessTask", "RecordsProcessed", "records processed/s"),
                _table_metric(
                    source_table,
                    "ConsumedWriteCapacityUnits",
                    "Sum",
                    "table writes (consumed WCU/s)",
                    per_second=True,
                ),
            ),
        ),
        WidgetSpec(
            "Leases total (Scan ReturnedItemCount) vs 2N",
            "Count",
            "items per Scan",
            (
                MetricSpec(
                    DYNAMODB_NAMESPACE,
                    "ReturnedItemCount",
                    "Average",
                    "leases table Scan ReturnedItemCount",
                    (("Operation", "Scan"), ("TableName", leases_table)),
                ),
            ),
            tuple(leases_lines),
        ),
        WidgetSpec(
            "Current leases per worker",
            "Count",
            "leases",
            (_worker_metric(settings, "RenewAllLeases", "CurrentLeases", "Maximum", "leases", total=False),),
        ),
        WidgetSpec(
            "Leases table: consumed vs provisioned capacity",
            "Count/Second",
            "capacity units/s",
            tuple(capacity),
        ),
        WidgetSpec(
            "Leases table throttles",
            "Count/Second",
            "throttled requests/s",
            (
                _table_metric(leases_table, "ReadThrottleEvents", "Sum", "read throttles/s", per_second=True),
                _table_metric(
                    leases_table, "WriteThrottleEvents", "Sum", "write throttles/s", per_second=True
                ),
                _worker_rate(settings, "LeaseTable", "LeaseTableThrottles", "throttles seen by workers/s"),
            ),
        ),
        WidgetSpec(
            "CPU per instance",
            "Percent",
            "% CPU",
            (_instance_metric(settings, "cpu_usage_active", "CPU"),),
        ),
        WidgetSpec(
            "Memory and disk per instance",
            "Percent",
            "% used",
            (
                _instance_metric(settings, "mem_used_percent", "memory"),
                _instance_metric(settings, "disk_used_percent", "disk /"),
            ),
        ),
        WidgetSpec(
            "MillisBehindLatest per worker",
            "Milliseconds",
            "ms behind",
            (_worker_metric(settings, "ProcessTask", "MillisBehindLatest", "Maximum", "lag", total=False),),
            (ReferenceLine("lag alarm", settings.scaling.lag_alarm_millis),),
        ),
        WidgetSpec(
            "Retries and dead letters",
            "Count/Second",
            "records/s",
            (
                _worker_rate(settings, "ProcessTask", "RecordsRetried", "retried/s"),
                _worker_rate(settings, "ProcessTask", "RecordsSentToDeadLetter", "dead-lettered/s"),
            ),
        ),
        WidgetSpec(
            "Records lost to trimming",
            "Count/Second",
            "trim events/s",
            (_worker_rate(settings, "Fetcher", "RecordsTrimmedLost", "lost to trimming/s"),),
        ),
    )

"""The dashboard's widgets as data: the one list the CloudWatch dashboard and ``consumer dashboard`` draw.

Why one list: the CDK dashboard (``infra/monitoring.py``, through ``infra/widgets.py``) and the
local PNG (``consumer/telemetry/dashboard.py``) would drift apart with a list each. Both render
:data:`WIDGETS`, in its order, with its titles, so a panel a developer reads after
``make demo`` is the panel an operator reads in CloudWatch. It lives here, not in ``infra/``,
because the worker package must never import the CDK layer; ``infra`` imports it.

Shape (frozen dataclasses, no CDK or matplotlib import):

* :class:`Widget` -- ``title``, ``unit``, ``y_label``, ``metrics`` and ``references`` (horizontal
  lines such as 2N, resolved per environment by :func:`reference_lines`).
* :class:`Metric` -- where its numbers come from (a :class:`Source`), ``name``, ``statistic`` (the
  CloudWatch statistic over one period), ``label``, ``each`` (one line per worker or instance, or
  else one line for the whole fleet: the statistic applied across them), fixed ``dimensions`` for
  AWS metrics, and ``only_if`` (a :class:`Condition` on the environment).

Rules, stated once here so both renderers follow them:

* A ``Sum`` is a counter and is drawn as a rate per second with zero for a period without data
  points, so a counter reads the same whatever the period (60 s in CloudWatch, the flush interval
  locally) and a quiet period shows as zero instead of a line across it. Every other statistic is a
  gauge, drawn as published, and a silent publisher breaks its line.
* A worker metric's ``Operation`` dimension is the one ``metric_names.py`` lists for it (one name,
  one operation), and every worker metric carries ``WorkerIdentifier``.
* The local run reads the workers' EMF documents back and nothing else: it draws the metrics of a
  :attr:`Source.local` source. A widget without one (the CloudWatch agent's host metrics) is drawn
  as "not available locally", naming where its numbers come from, so the two dashboards still have
  the same panels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from consumer.telemetry.metric_names import spec_for
from ground.settings import Settings

Statistic = Literal["Sum", "Average", "Maximum", "Minimum"]


@dataclass(frozen=True)
class Source:
    """Where a metric's numbers come from; ``per`` names the dimension ``each`` draws a line per value of."""

    key: str
    description: str
    local: bool  # the local run has these numbers (the workers' EMF documents read back)
    per: str | None = None


WORKER = Source("worker", "the workers' EMF metrics", local=True, per="WorkerIdentifier")
LEASES_TABLE = Source("leases_table", "AWS/DynamoDB metrics of the leases table", local=False)
SOURCE_TABLE = Source("source_table", "AWS/DynamoDB metrics of the source table", local=False)
AGENT = Source("agent", "the CloudWatch agent's host metrics", local=False, per="InstanceId")


class Condition(StrEnum):
    """A metric that exists only in some environments."""

    PROVISIONED_LEASES_TABLE = "provisioned_leases_table"  # provisioned capacity has no on-demand figure


def holds(condition: Condition, settings: Settings) -> bool:
    if condition is Condition.PROVISIONED_LEASES_TABLE:
        return settings.worker.lease_table_billing_mode == "PROVISIONED"
    raise AssertionError(condition)  # pragma: no cover - every Condition is handled above


@dataclass(frozen=True)
class Metric:
    source: Source
    name: str
    statistic: Statistic
    label: str
    each: bool = False
    dimensions: tuple[tuple[str, str], ...] = ()
    only_if: Condition | None = None

    def __post_init__(self) -> None:
        if self.each and self.source.per is None:
            raise ValueError(f"{self.name}: {self.source.key} metrics have no line per worker or instance")
        if self.source is WORKER and spec_for(self.name) is None:
            raise ValueError(f"{self.name} is not in consumer/telemetry/metric_names.py")

    @property
    def per_second(self) -> bool:
        """Counters (a Sum) are drawn as rates per second; see the module docstring."""
        return self.statistic == "Sum"

    @property
    def operation(self) -> str | None:
        """The ``Operation`` dimension of a worker metric, as the catalogue lists it."""
        spec = spec_for(self.name) if self.source is WORKER else None
        return spec.operation if spec is not None else None


class Reference(StrEnum):
    SCALE_OUT = "scale_out"  # multiplier x N (2N by default): the scale-out alarm's threshold
    PARTITIONS = "partitions"  # N, the table's expected partition count
    LAG_ALARM = "lag_alarm"  # the lag alarm's threshold


@dataclass(frozen=True)
class ReferenceLine:
    label: str
    value: float


@dataclass(frozen=True)
class Widget:
    title: str
    unit: str
    y_label: str
    metrics: tuple[Metric, ...]
    references: tuple[Reference, ...] = field(default=())

    @property
    def local_metrics(self) -> tuple[Metric, ...]:
        return tuple(m for m in self.metrics if m.source.local)


def reference_lines(settings: Settings) -> dict[Reference, ReferenceLine]:
    """Every reference line's label and value for one environment.

    The scale-out figure is the alarm's (``infra.scaling.scaling_thresholds`` computes the same
    product; tests/infra checks they agree in every environment).
    """
    n, _ = settings.table.expected_partitions()
    multiplier = settings.scaling.returned_item_count_multiplier
    return {
        Reference.SCALE_OUT: ReferenceLine(
            f"{multiplier:g}N = {multiplier * n:g} (scale out)", multiplier * n
        ),
        Reference.PARTITIONS: ReferenceLine(f"N = {n}", float(n)),
        Reference.LAG_ALARM: ReferenceLine("lag alarm", settings.scaling.lag_alarm_millis),
    }


def _rate(name: str, label: str) -> Metric:
    """A worker counter summed over the fleet."""
    return Metric(WORKER, name, "Sum", label)


def _per_worker(name: str, statistic: Statistic, label: str) -> Metric:
    return Metric(WORKER, name, statistic, label, each=True)


def _table_rate(source: Source, name: str, label: str) -> Metric:
    return Metric(source, name, "Sum", label)


def _per_instance(name: str, label: str) -> Metric:
    # The agent publishes these under the application's namespace, rolled up per instance.
    return Metric(AGENT, name, "Average", label, each=True)


WIDGETS: tuple[Widget, ...] = (
    Widget(
        "Records processed vs table writes",
        "Count/Second",
        "records/s",
        (
            _rate("RecordsProcessed", "records processed/s"),
            _table_rate(SOURCE_TABLE, "ConsumedWriteCapacityUnits", "table writes (consumed WCU/s)"),
            _rate("TableWrites", "table writes by the load generator/s"),
        ),
    ),
    Widget(
        "Leases total vs 2N",
        "Count",
        "leases",
        (
            Metric(
                LEASES_TABLE,
                "ReturnedItemCount",
                "Average",
                "Scan ReturnedItemCount per page (the leases while the table is one page)",
                dimensions=(("Operation", "Scan"),),
            ),
            Metric(WORKER, "TotalLeases", "Maximum", "leases seen by the workers"),
            Metric(WORKER, "OpenShards", "Maximum", "open shards N (the sync leader's listing)"),
        ),
        (Reference.SCALE_OUT, Reference.PARTITIONS),
    ),
    Widget(
        "Current leases per worker",
        "Count",
        "leases",
        (_per_worker("CurrentLeases", "Maximum", "leases"),),
    ),
    Widget(
        "Leases table: consumed vs provisioned capacity",
        "Count/Second",
        "capacity units/s",
        (
            _table_rate(LEASES_TABLE, "ConsumedReadCapacityUnits", "consumed RCU/s"),
            _table_rate(LEASES_TABLE, "ConsumedWriteCapacityUnits", "consumed WCU/s"),
            Metric(
                LEASES_TABLE,
                "ProvisionedReadCapacityUnits",
                "Average",
                "provisioned RCU",
                only_if=Condition.PROVISIONED_LEASES_TABLE,
            ),
            Metric(
                LEASES_TABLE,
                "ProvisionedWriteCapacityUnits",
                "Average",
                "provisioned WCU",
                only_if=Condition.PROVISIONED_LEASES_TABLE,
            ),
            _rate("LeaseTableConsumedReadCapacity", "RCU/s reported by workers"),
            _rate("LeaseTableConsumedWriteCapacity", "WCU/s reported by workers"),
        ),
    ),
    Widget(
        "Leases table throttles",
        "Count/Second",
        "throttled requests/s",
        (
            _table_rate(LEASES_TABLE, "ReadThrottleEvents", "read throttles/s"),
            _table_rate(LEASES_TABLE, "WriteThrottleEvents", "write throttles/s"),
            _rate("LeaseTableThrottles", "throttles seen by workers/s"),
        ),
    ),
    Widget("CPU per instance", "Percent", "% CPU", (_per_instance("cpu_usage_active", "CPU"),)),
    Widget(
        "Memory and disk per instance",
        "Percent",
        "% used",
        (_per_instance("mem_used_percent", "memory"), _per_instance("disk_used_percent", "disk /")),
    ),
    Widget(
        "CPU per worker",
        "Percent",
        "% of one core",
        (_per_worker("CpuUtilization", "Average", "CPU"),),
    ),
    Widget(
        "Memory per worker",
        "Megabytes",
        "resident MB",
        (_per_worker("MemoryResident", "Maximum", "resident memory"),),
    ),
    Widget(
        "MillisBehindLatest per worker",
        "Milliseconds",
        "ms behind",
        (_per_worker("MillisBehindLatest", "Maximum", "lag"),),
        (Reference.LAG_ALARM,),
    ),
    Widget(
        "Retries and dead letters",
        "Count/Second",
        "records/s",
        (
            _rate("RecordsRetried", "retried/s"),
            _rate("RecordsSentToDeadLetter", "dead-lettered/s"),
        ),
    ),
    Widget(
        "Parallel lanes per worker",
        "Count",
        "lanes / records",
        (
            _per_worker("LanesInFlight", "Maximum", "lanes in flight"),
            _per_worker("LaneRecordsInFlight", "Maximum", "records in the fullest lane"),
        ),
    ),
    Widget(
        "Slowest lane lag per worker",
        "Milliseconds",
        "ms behind",
        (_per_worker("SlowestLaneLag", "Maximum", "slowest lane"),),
    ),
    Widget(
        "Tumbling window state size",
        "Bytes",
        "bytes",
        (_per_worker("WindowStateBytes", "Maximum", "window state"),),
    ),
    Widget(
        "Records lost to trimming",
        "Count/Second",
        "trim events/s",
        (_rate("RecordsTrimmedLost", "lost to trimming/s"),),
    ),
)


def widgets_for(settings: Settings, widgets: tuple[Widget, ...] = WIDGETS) -> tuple[Widget, ...]:
    """The list for one environment: metrics whose :class:`Condition` does not hold are left out."""
    return tuple(
        Widget(
            w.title,
            w.unit,
            w.y_label,
            tuple(m for m in w.metrics if m.only_if is None or holds(m.only_if, settings)),
            w.references,
        )
        for w in widgets
    )

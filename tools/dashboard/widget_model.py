"""The shape of the dashboard's widgets (:mod:`tools.dashboard.widgets` holds the list itself).

Frozen dataclasses, no CDK or matplotlib import, read by both renderers:

* :class:`Source` -- where a metric's numbers come from, and whether each dashboard has them.
* :class:`Metric` -- one line (or one per worker or instance): its source, name, CloudWatch
  statistic over a period, how the fleet's lines fold into one (``across``), and ``absent``: why
  its line can be missing while the fleet runs, said on the panel (empty: every running worker
  publishes it, so a missing line is a fault, not a state), and ``gaps``: why its drawn line can
  break for a while (said on the panel when it does).
* :class:`Formula` -- a line computed from metrics (a sum of rates times factors, optionally
  divided by another metric's fleet line), against the left or the right axis.
* :class:`Widget` -- a panel: title, unit, axis labels, metrics, formulas, reference lines, and a
  ``note`` shown with it on both dashboards.
* :class:`Condition` -- a metric that exists only where a setting turns its feature on;
  :func:`tools.dashboard.widgets.widgets_for` leaves it out elsewhere and records why.

A panel never stays empty without saying why: every metric that can be missing carries its reason,
and a panel whose metrics are all switched off in an environment says which setting did it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from consumer.api.metrics import spec_for
from ground.settings import Settings

Statistic = Literal["Sum", "Average", "Maximum", "Minimum"]


@dataclass(frozen=True)
class Source:
    """Where a metric's numbers come from; ``per`` names the dimension ``each`` draws a line per value of."""

    key: str
    description: str
    local: bool  # the local run has these numbers (EMF documents read back)
    per: str | None = None
    cloud: bool = True  # the CloudWatch dashboard has them


WORKER = Source("worker", "the workers' EMF metrics", local=True, per="WorkerIdentifier")
LOAD_GENERATOR = Source(
    "load_generator", "`consumer demo`'s load generator (local only)", local=True, cloud=False
)
LEASES_TABLE = Source("leases_table", "AWS/DynamoDB metrics of the leases table", local=False)
SOURCE_TABLE = Source("source_table", "AWS/DynamoDB metrics of the source table", local=False)
# Stream-level (StreamName): AWS publishes them for every stream, over all its consumers.
SOURCE_STREAM = Source("source_stream", "AWS/Kinesis metrics of the source stream", local=False)
AGENT = Source("agent", "the CloudWatch agent's host metrics on EC2", local=False, per="InstanceId")


class Condition(StrEnum):
    """A metric that exists only in some environments."""

    PROVISIONED_LEASES_TABLE = "provisioned_leases_table"  # provisioned capacity has no on-demand figure
    ON_DEMAND_LEASES_TABLE = "on_demand_leases_table"  # priced per request, not per hour
    LANES = "lanes"  # per-key parallelism: processing.parallelization_factor > 1
    WINDOWS = "windows"  # tumbling windows: processing.tumbling_window_seconds > 0
    DYNAMODB_SOURCE = "dynamodb_source"  # the fleet reads tables' DynamoDB streams (source.kind)
    KINESIS_SOURCE = "kinesis_source"  # the fleet reads a Kinesis data stream (source.kind: kinesis)


def holds(condition: Condition, settings: Settings) -> bool:
    provisioned = settings.worker.lease_table_billing_mode == "PROVISIONED"
    if condition is Condition.PROVISIONED_LEASES_TABLE:
        return provisioned
    if condition is Condition.ON_DEMAND_LEASES_TABLE:
        return not provisioned
    if condition is Condition.LANES:
        return settings.processing.parallelization_factor > 1
    if condition is Condition.WINDOWS:
        return settings.processing.tumbling_window_seconds > 0
    if condition is Condition.DYNAMODB_SOURCE:
        return not settings.source.is_kinesis
    if condition is Condition.KINESIS_SOURCE:
        return settings.source.is_kinesis
    raise AssertionError(condition)  # pragma: no cover - every Condition is handled above


def why_off(condition: Condition, settings: Settings) -> str:
    """What turned ``condition``'s metrics off in this environment (said on the panel)."""
    if condition is Condition.PROVISIONED_LEASES_TABLE:
        return "the leases table is on demand (worker.lease_table_billing_mode)"
    if condition is Condition.ON_DEMAND_LEASES_TABLE:
        return "the leases table is provisioned (worker.lease_table_billing_mode)"
    if condition is Condition.LANES:
        factor = settings.processing.parallelization_factor
        return f"per-key lanes are off in env {settings.env} (processing.parallelization_factor is {factor})"
    if condition is Condition.WINDOWS:
        return f"tumbling windows are off in env {settings.env} (processing.tumbling_window_seconds is 0)"
    if condition is Condition.DYNAMODB_SOURCE:
        return f"env {settings.env} reads a Kinesis stream (source.kind: kinesis)"
    if condition is Condition.KINESIS_SOURCE:
        return f"env {settings.env} reads DynamoDB streams (source.kind: dynamodb)"
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
    absent: str = ""  # why the line can be missing while the fleet runs ("" : it cannot)
    across: Statistic | None = None  # how the fleet's lines fold into one (default: the statistic)
    gaps: str = ""  # why a gauge's drawn line can break for a while ("": only when a publisher stops)

    def __post_init__(self) -> None:
        if self.each and self.source.per is None:
            raise ValueError(f"{self.name}: {self.source.key} metrics have no line per worker or instance")
        if self.source in (WORKER, LOAD_GENERATOR) and spec_for(self.name) is None:
            raise ValueError(f"{self.name} is not in consumer/telemetry/metric_names.py")

    @property
    def per_second(self) -> bool:
        """Counters (a Sum) are drawn as rates per second; see tools/dashboard/widgets.py."""
        return self.statistic == "Sum"

    @property
    def fold(self) -> Statistic:
        """The statistic that folds the fleet's lines (one per worker) into the fleet's line."""
        return self.across or self.statistic

    @property
    def operation(self) -> str | None:
        """The ``Operation`` dimension of a metric the product publishes, as the catalogue lists it."""
        spec = spec_for(self.name) if self.source in (WORKER, LOAD_GENERATOR) else None
        return spec.operation if spec is not None else None


@dataclass(frozen=True)
class Formula:
    """A line computed from the fleet's lines of metrics: the sum of each term's rate (or level)
    times its factor, divided by ``over``'s line when given. Both renderers compute it alike."""

    label: str
    terms: tuple[tuple[Metric, float], ...]
    over: Metric | None = None
    right: bool = False  # against the widget's right axis
    only_if: Condition | None = None
    absent: str = ""

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return tuple(m for m, _ in self.terms) + ((self.over,) if self.over is not None else ())

    @property
    def local(self) -> bool:
        return all(m.source.local for m in self.metrics)


class Reference(StrEnum):
    SCALE_OUT = "scale_out"  # multiplier x N (2N by default): the scale-out alarm's threshold
    PARTITIONS = "partitions"  # N, the table's expected partition count
    LAG_ALARM = "lag_alarm"  # the lag alarm's threshold
    LEASES_TABLE_PROVISIONED = "leases_table_provisioned"  # $ a month of the provisioned leases table
    STREAM_READ_BYTES_LIMIT = "stream_read_bytes_limit"  # a Kinesis stream's read limit: 2 MiB/s x N
    STREAM_READ_CALLS_LIMIT = "stream_read_calls_limit"  # a Kinesis shard's 5 GetRecords/s


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
    note: str = ""  # shown with the panel on both dashboards; {placeholders} filled per environment
    formulas: tuple[Formula, ...] = ()
    right_label: str = ""  # the right axis' label, when a formula or reference is drawn against it
    right_references: tuple[Reference, ...] = ()
    off: tuple[str, ...] = ()  # set by widgets_for: why metrics of the list were left out here
    # The panel exists only where this holds (the source's own panels): elsewhere it is no panel at all,
    # not an empty one, since nothing there could ever draw it.
    only_if: Condition | None = None

    @property
    def local_metrics(self) -> tuple[Metric, ...]:
        return tuple(m for m in self.metrics if m.source.local)

    @property
    def cloud_metrics(self) -> tuple[Metric, ...]:
        return tuple(m for m in self.metrics if m.source.cloud)

    def cloud_notes(self) -> tuple[str, ...]:
        """What the CloudWatch panel says under its graph: why a line can be missing there."""
        notes = [*self.off]
        notes += [f"{m.label}: {m.absent}" for m in self.cloud_metrics if m.absent]
        notes += [f"{m.label}: {m.gaps}" for m in self.cloud_metrics if m.gaps]
        notes += [f"{f.label}: {f.absent}" for f in self.formulas if f.absent]
        return tuple(dict.fromkeys([*notes, *([self.note] if self.note else [])]))

"""The dashboard's widgets as data: the one list the CloudWatch dashboard and ``consumer dashboard`` draw.

Why one list: the CDK dashboard (``infra/monitoring.py``, through ``infra/widgets.py``) and the local
PNG (``tools/dashboard/render.py``) would drift apart with a list each. Both render :data:`WIDGETS`, in
its order, with its titles, so a panel a developer reads after ``make demo`` is the panel an operator
reads in CloudWatch. It lives here, not in ``infra/``, because the worker package must never import the
CDK layer; ``infra`` imports it. Its shape is in :mod:`tools.dashboard.widget_model`.

Rules, stated once here so both renderers follow them:

* A ``Sum`` is a counter and is drawn as a rate per second with zero for a period without data
  points, so a counter reads the same whatever the period (60 s in CloudWatch, the flush interval
  locally) and a quiet period shows as zero instead of a line across it. Every other statistic is a
  gauge, drawn as published, and a silent publisher breaks its line.
* Every axis starts at zero: a gauge that moves by 2 % must not read as growth.
* A worker metric's ``Operation`` dimension is the one ``metric_names.py`` lists for it (one name,
  one operation), and every worker metric carries ``WorkerIdentifier``.
* The local run reads the workers' EMF documents back and nothing else: it draws the metrics of a
  local source. The CloudWatch dashboard draws the metrics of a cloud source (the demo's load
  generator is local only). A panel says why each line it lacks is missing: the metric's
  ``absent`` reason, its source, or the setting that turned it off; and CloudWatch shows the same
  reasons in a text block under the graph.
"""

from __future__ import annotations

from dataclasses import replace

from ground.settings import Settings
from tools.dashboard import prices
from tools.dashboard.stream_widgets import (
    KINESIS_READS,
    KINESIS_RECORDS,
    LEASES_HELD,
    STREAM_READS,
    kinesis_reference_lines,
)
from tools.dashboard.widget_model import (
    AGENT,
    LEASES_TABLE,
    LOAD_GENERATOR,
    SOURCE_STREAM,
    SOURCE_TABLE,
    WORKER,
    Condition,
    Formula,
    Metric,
    Reference,
    ReferenceLine,
    Source,
    Statistic,
    Widget,
    holds,
    why_off,
)

__all__ = [
    "AGENT",
    "LEASES_TABLE",
    "LOAD_GENERATOR",
    "SOURCE_STREAM",
    "SOURCE_TABLE",
    "WIDGETS",
    "WORKER",
    "Condition",
    "Formula",
    "Metric",
    "Reference",
    "ReferenceLine",
    "Source",
    "Statistic",
    "Widget",
    "reference_lines",
    "widgets_for",
]


def reference_lines(settings: Settings) -> dict[Reference, ReferenceLine]:
    """Every reference line's label and value for one environment.

    The scale-out figure is the alarm's (``infra.scaling.scaling_thresholds`` computes the same
    product; tests/infra checks they agree in every environment). The provisioned leases table's
    monthly price is there only when it is provisioned.
    """
    n, _ = settings.partitions()
    multiplier = settings.scaling.returned_item_count_multiplier
    lines = {
        Reference.SCALE_OUT: ReferenceLine(
            f"{multiplier:g}N = {multiplier * n:g} (scale out)", multiplier * n
        ),
        Reference.PARTITIONS: ReferenceLine(f"N = {n}", float(n)),
        Reference.LAG_ALARM: ReferenceLine(
            "lag alarm", settings.scaling.lag_alarm_millis_over(settings.source.stream_retention_hours)
        ),
    }
    lines.update(kinesis_reference_lines(settings, n))
    worker = settings.worker
    if worker.lease_table_billing_mode == "PROVISIONED":
        reads, writes = worker.initial_lease_table_read_capacity, worker.initial_lease_table_write_capacity
        cost = prices.provisioned_per_month(reads, writes)
        lines[Reference.LEASES_TABLE_PROVISIONED] = ReferenceLine(
            f"leases table provisioned {reads} RCU + {writes} WCU: ${cost:,.0f}/month", cost
        )
    return lines


def _rate(name: str, label: str, absent: str = "") -> Metric:
    """A worker counter summed over the fleet."""
    return Metric(WORKER, name, "Sum", label, absent=absent)


def _per_worker(name: str, statistic: Statistic, label: str, **kwargs: object) -> Metric:
    return Metric(WORKER, name, statistic, label, each=True, **kwargs)  # type: ignore[arg-type]


def _table_rate(source: Source, name: str, label: str, absent: str = "") -> Metric:
    return Metric(source, name, "Sum", label, absent=absent)


def _per_instance(name: str, label: str) -> Metric:
    # The agent publishes these under the application's namespace, rolled up per instance.
    return Metric(AGENT, name, "Average", label, each=True)


LEASE_READS = _rate("LeaseTableConsumedReadCapacity", "RCU/s reported by workers")
LEASE_WRITES = _rate("LeaseTableConsumedWriteCapacity", "WCU/s reported by workers")

WIDGETS: tuple[Widget, ...] = (
    Widget(
        "Records processed vs table writes",
        "Count/Second",
        "records/s",
        (
            _rate("RecordsProcessed", "records processed/s", "only while records arrive"),
            _table_rate(
                SOURCE_TABLE,
                "ConsumedWriteCapacityUnits",
                "table writes (consumed WCU/s)",
                "AWS publishes it only for minutes with writes",
            ),
            Metric(
                LOAD_GENERATOR,
                "TableWrites",
                "Sum",
                "table writes by the load generator/s",
                absent="only `consumer demo`'s load generator counts writes locally",
            ),
        ),
        note="Records processed need not add up to the writes: a worker that is killed publishes nothing "
        "for its last metrics period (metrics.flush_interval_seconds), so what it processed then is "
        "missing here, and the records it processed but had not checkpointed are processed again by "
        "the next holder and counted twice.",
        only_if=Condition.DYNAMODB_SOURCE,
    ),
    KINESIS_RECORDS,
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
            Metric(
                WORKER,
                "OpenShards",
                "Maximum",
                "open shards N (the sync leader's listing)",
                absent="only the shard-sync leader publishes it, after a whole listing: none until a leader "
                "has listed and flushed its metrics, and none from a leader killed in between",
                gaps="only the shard-sync leader publishes it: when the leader stops (a kill, a lost "
                "instance) the line breaks until another worker's heartbeat outlives the leader's "
                "(worker.failover_time_millis) and it lists the stream",
            ),
        ),
        (Reference.SCALE_OUT, Reference.PARTITIONS),
        note="Above 2N for less than {alarm_window} adds no instance: a rollover or a split holds parents "
        "and children for a moment. Only leases at 2N for {alarm_window} mean the fleet falls behind.",
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
            LEASE_READS,
            LEASE_WRITES,
        ),
    ),
    Widget(
        "Leases table throttles",
        "Count/Second",
        "throttled requests/s",
        (
            _table_rate(
                LEASES_TABLE, "ReadThrottleEvents", "read throttles/s", "only when a read is throttled"
            ),
            _table_rate(
                LEASES_TABLE, "WriteThrottleEvents", "write throttles/s", "only when a write is throttled"
            ),
            _rate("LeaseTableThrottles", "throttles seen by workers/s", "only when a request is throttled"),
        ),
    ),
    Widget(
        "CPU per instance",
        "Percent",
        "% CPU",
        (_per_instance("cpu_usage_active", "CPU"),),
        note="The CloudWatch agent publishes it on each EC2 instance; a local run has no instance: "
        "each worker's own CPU is in 'CPU per worker'.",
    ),
    Widget(
        "Memory and disk per instance",
        "Percent",
        "% used",
        (_per_instance("mem_used_percent", "memory"), _per_instance("disk_used_percent", "disk /")),
        note="The CloudWatch agent publishes it on each EC2 instance; a local run has no instance: "
        "each worker's own memory is in 'Memory per worker'.",
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
        note="From zero: a worker's resident memory grows while it warms up and then holds; a line that "
        "keeps climbing for hours is a leak.",
    ),
    Widget(
        "MillisBehindLatest per worker",
        "Milliseconds",
        "ms behind",
        (_per_worker("MillisBehindLatest", "Maximum", "lag", absent="only while records arrive"),),
        (Reference.LAG_ALARM,),
    ),
    Widget(
        "End-to-end lag: written -> handled",
        "Milliseconds",
        "ms",
        (
            Metric(
                WORKER,
                "EndToEndLag",
                "Maximum",
                "fleet (the oldest record handled)",
                absent="only while records are handled",
            ),
            _per_worker("EndToEndLag", "Maximum", "per worker", absent="only while records are handled"),
        ),
        note="A record's ApproximateCreationDateTime (whole seconds) to the moment the processor finished "
        "it: what MillisBehindLatest does not show, a record read on time but handled late (retries, a "
        "parked key, a slow lane).",
    ),
    Widget(
        "Retries and dead letters",
        "Count/Second",
        "records/s",
        (
            _rate("RecordsRetried", "retried/s", "only when a batch fails"),
            _rate(
                "RecordsSentToDeadLetter", "dead-lettered/s", "only when a record exhausts processing.retry"
            ),
        ),
    ),
    Widget(
        "Parallel lanes per worker",
        "Count",
        "lanes / records",
        (
            _per_worker("LanesInFlight", "Maximum", "lanes in flight", only_if=Condition.LANES),
            _per_worker(
                "LaneRecordsInFlight", "Maximum", "records in the fullest lane", only_if=Condition.LANES
            ),
        ),
    ),
    Widget(
        "Slowest lane lag per worker",
        "Milliseconds",
        "ms behind",
        (_per_worker("SlowestLaneLag", "Maximum", "slowest lane", only_if=Condition.LANES),),
    ),
    Widget(
        "Tumbling window state size",
        "Bytes",
        "bytes",
        (_per_worker("WindowStateBytes", "Maximum", "window state", only_if=Condition.WINDOWS),),
    ),
    *KINESIS_READS,
    Widget(
        "Records lost to trimming",
        "Count/Second",
        "trim events/s",
        (
            _rate(
                "RecordsTrimmedLost",
                "lost to trimming/s",
                "only when unread records are trimmed: it should stay empty",
            ),
        ),
    ),
    Widget(
        "Cost: stream reads per shard and the leases table",
        "Count/Second",
        "stream read requests/s per shard",
        (),
        formulas=(
            Formula(
                "stream read requests/s per shard",
                ((STREAM_READS, 1.0),),
                over=LEASES_HELD,
                absent="only while a worker holds leases",
            ),
            Formula(
                "stream reads, $/month at this rate ($0.02 per 100 000 requests)",
                ((STREAM_READS, prices.per_month(prices.STREAM_READ_REQUEST)),),
                right=True,
            ),
            Formula(
                "leases table, $/month at this rate (on demand: $0.125 / $0.625 per million RRU / WRU)",
                (
                    (LEASE_READS, prices.per_month(prices.ON_DEMAND_READ_UNIT)),
                    (LEASE_WRITES, prices.per_month(prices.ON_DEMAND_WRITE_UNIT)),
                ),
                right=True,
                only_if=Condition.ON_DEMAND_LEASES_TABLE,
            ),
        ),
        right_label="$ per month at this rate",
        right_references=(Reference.LEASES_TABLE_PROVISIONED,),
        note="An idle shard costs its polls: one GetRecords a second is $0.53 a month per shard "
        "(us-east-1 list prices; 2.5 M stream reads a month are free). worker.idle_time_between_reads_millis "
        "and max_idle_time_between_reads_millis set the rate.",
        only_if=Condition.DYNAMODB_SOURCE,
    ),
)


def note_values(settings: Settings) -> dict[str, str]:
    """What a widget's note names for one environment."""
    scaling = settings.scaling
    seconds = scaling.period_seconds * scaling.evaluation_periods
    return {"alarm_window": f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds} s"}


def widgets_for(settings: Settings, widgets: tuple[Widget, ...] = WIDGETS) -> tuple[Widget, ...]:
    """The list for one environment: metrics and formulas whose :class:`Condition` does not hold are
    left out, and the panel records why (``off``); notes get this environment's figures."""
    values = note_values(settings)
    resolved = []
    for widget in widgets:
        if widget.only_if is not None and not holds(widget.only_if, settings):
            continue
        conditions = [m.only_if for m in widget.metrics] + [f.only_if for f in widget.formulas]
        off = {why_off(c, settings) for c in conditions if c is not None and not holds(c, settings)}
        kept = tuple(m for m in widget.metrics if m.only_if is None or holds(m.only_if, settings))
        formulas = tuple(f for f in widget.formulas if f.only_if is None or holds(f.only_if, settings))
        # A metric left out beside others that stay (provisioned capacity of an on-demand table)
        # is no missing line; a panel left with nothing says which setting emptied it.
        empty = not (kept or formulas)
        resolved.append(
            replace(
                widget,
                metrics=kept,
                formulas=formulas,
                note=widget.note.format(**values),
                off=tuple(sorted(off)) if empty else (),
            )
        )
    return tuple(resolved)

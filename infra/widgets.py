"""The dashboard's one widget list (:mod:`consumer.telemetry.widgets`) in CloudWatch terms.

The list itself, and the rules both dashboards follow, live in ``consumer/telemetry/widgets.py`` so
that ``consumer dashboard`` draws it too without importing the CDK layer. This module only resolves
it for one environment -- namespaces, table names, the dimensions every metric carries, thresholds --
(:func:`dashboard_widgets`) and turns each resolved widget into a CloudWatch graph
(:func:`graph_widget`).

Resolved shape (frozen dataclasses):

* :class:`ResolvedWidget` -- ``title``, ``unit``, ``y_label``, ``metrics`` and ``lines`` (the
  reference lines' labels and values for this environment).
* :class:`ResolvedMetric` -- ``namespace``, ``name``, ``dimensions`` (sorted (name, value) pairs),
  ``statistic``, ``label``, ``per`` (``None`` for one metric, or the dimension -- ``WorkerIdentifier``
  / ``InstanceId`` -- whose every value CloudWatch must find with a SEARCH expression), ``across``
  (the metric-math function that folds those lines into one for the fleet, or ``None`` for a line
  each) and ``per_second`` (a counter: FILL(x, 0) / period, the same rate the local PNG draws).
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from consumer.telemetry.widgets import (
    AGENT,
    LEASES_TABLE,
    SOURCE_TABLE,
    WORKER,
    Metric,
    ReferenceLine,
    Statistic,
    Widget,
    reference_lines,
    widgets_for,
)
from ground.settings import Settings

DASHBOARD_PERIOD_SECONDS = 60
DYNAMODB_NAMESPACE = "AWS/DynamoDB"
# The metric-math function that folds a fleet's lines into one, by the metric's statistic.
ACROSS = {"Sum": "SUM", "Average": "AVG", "Maximum": "MAX", "Minimum": "MIN"}


@dataclass(frozen=True)
class ResolvedMetric:
    namespace: str
    name: str
    statistic: Statistic
    label: str
    dimensions: tuple[tuple[str, str], ...] = ()
    per: str | None = None
    across: str | None = None
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
class ResolvedWidget:
    title: str
    unit: str
    y_label: str
    metrics: tuple[ResolvedMetric, ...]
    lines: tuple[ReferenceLine, ...] = ()


def resolve_metric(metric: Metric, settings: Settings) -> ResolvedMetric:
    """Where ``metric`` lives in this environment's CloudWatch."""
    dimensions = dict(metric.dimensions)
    if metric.source is WORKER:
        namespace = settings.metrics_namespace
        operation = metric.operation
        if operation is None:  # pragma: no cover - Metric refuses a worker metric outside the catalogue
            raise AssertionError(metric.name)
        dimensions["Operation"] = operation
    elif metric.source is AGENT:
        namespace = settings.metrics_namespace
    elif metric.source is LEASES_TABLE:
        namespace = DYNAMODB_NAMESPACE
        dimensions["TableName"] = settings.leases_table_name
    elif metric.source is SOURCE_TABLE:
        namespace = DYNAMODB_NAMESPACE
        dimensions["TableName"] = settings.table.existing_table_name or settings.table.name
    else:  # pragma: no cover - every Source of consumer.telemetry.widgets is handled above
        raise AssertionError(metric.source)
    per = metric.source.per
    return ResolvedMetric(
        namespace=namespace,
        name=metric.name,
        statistic=metric.statistic,
        label=metric.label,
        dimensions=tuple(sorted(dimensions.items())),
        per=per,
        across=None if metric.each or per is None else ACROSS[metric.statistic],
        per_second=metric.per_second,
    )


def resolve(widget: Widget, settings: Settings) -> ResolvedWidget:
    lines = reference_lines(settings)
    return ResolvedWidget(
        widget.title,
        widget.unit,
        widget.y_label,
        tuple(resolve_metric(m, settings) for m in widget.metrics),
        tuple(lines[r] for r in widget.references),
    )


def dashboard_widgets(settings: Settings) -> tuple[ResolvedWidget, ...]:
    """Every widget of the one list, resolved for ``settings``' environment, in the list's order."""
    return tuple(resolve(w, settings) for w in widgets_for(settings))


def graph_metric(spec: ResolvedMetric, period: int, index: int) -> cloudwatch.IMetric:
    """One line (or one per worker / instance): a rate per second is FILL(x, 0) / the period, so a
    period without data points reads zero (the local dashboard draws the same)."""
    if spec.per is not None:
        search = spec.search_expression(period)
        expression = f"{spec.across}({search})" if spec.across else search
        if spec.per_second:
            # PERIOD() takes a metric, not an expression's result: the SEARCH fixes the period.
            expression = f"FILL({expression}, 0) / {period}"
        return cloudwatch.MathExpression(
            expression=expression,
            using_metrics={},
            label=spec.label,
            period=Duration.seconds(period),
        )
    metric = cloudwatch.Metric(
        namespace=spec.namespace,
        metric_name=spec.name,
        dimensions_map=dict(spec.dimensions),
        statistic=spec.statistic,
        label=spec.label,
        period=Duration.seconds(period),
    )
    if spec.per_second:
        return cloudwatch.MathExpression(
            expression=f"FILL(m{index}, 0) / PERIOD(m{index})",
            using_metrics={f"m{index}": metric},
            label=spec.label,
            period=Duration.seconds(period),
        )
    return metric


def graph_widget(spec: ResolvedWidget, period: int = DASHBOARD_PERIOD_SECONDS) -> cloudwatch.GraphWidget:
    """One dashboard graph from its resolved definition."""
    return cloudwatch.GraphWidget(
        title=spec.title,
        left=[graph_metric(metric, period, i) for i, metric in enumerate(spec.metrics)],
        left_y_axis=cloudwatch.YAxisProps(label=spec.y_label, show_units=False, min=0),
        left_annotations=[
            cloudwatch.HorizontalAnnotation(value=line.value, label=line.label) for line in spec.lines
        ],
        width=12,
        height=6,
    )

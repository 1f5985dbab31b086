"""The dashboard's one widget list (:mod:`tools.dashboard.widgets`) in CloudWatch terms.

The list itself, and the rules both dashboards follow, live in ``tools/dashboard/widgets.py`` so
that ``consumer dashboard`` draws it too without importing the CDK layer. This module only resolves
it for one environment -- namespaces, table names, the dimensions every metric carries, thresholds --
(:func:`dashboard_widgets`) and turns each resolved widget into a CloudWatch graph
(:func:`graph_widget`), with a text block under it saying why a line can be missing there
(:func:`panel`): no panel is left empty without a reason.

Resolved shape (frozen dataclasses):

* :class:`ResolvedWidget` -- ``title``, ``unit``, ``y_label``, ``metrics`` and ``lines`` (the
  reference lines' labels and values for this environment).
* :class:`ResolvedMetric` -- ``namespace``, ``name``, ``dimensions`` (sorted (name, value) pairs),
  ``statistic``, ``label``, ``per`` (``None`` for one metric, or the dimension -- ``WorkerIdentifier``
  / ``InstanceId`` -- whose every value CloudWatch must find with a SEARCH expression), ``across``
  (the metric-math function that folds those lines into one for the fleet, or ``None`` for a line
  each) and ``per_second`` (a counter: FILL(x, 0) / period, the same rate the local PNG draws).
* :class:`ResolvedFormula` -- a computed line: its metric-math expression and its axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from ground.settings import Settings
from tools.dashboard.widgets import (
    AGENT,
    LEASES_TABLE,
    SOURCE_STREAM,
    SOURCE_TABLE,
    WORKER,
    Formula,
    Metric,
    ReferenceLine,
    Statistic,
    Widget,
    reference_lines,
    widgets_for,
)

DASHBOARD_PERIOD_SECONDS = 60
DYNAMODB_NAMESPACE = "AWS/DynamoDB"
KINESIS_NAMESPACE = "AWS/Kinesis"
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

    def fleet_line(self, period_seconds: int) -> str:
        """A metric-math expression of the fleet's one line (a rate per second for a counter)."""
        if self.per is None:
            raise ValueError(f"{self.name}: a formula's terms are searched per worker")
        fold = ACROSS[self.statistic] if self.across is None else self.across
        line = f"{fold}({self.search_expression(period_seconds)})"
        return f"FILL({line}, 0) / {period_seconds}" if self.per_second else line


@dataclass(frozen=True)
class ResolvedFormula:
    label: str
    expression: str
    right: bool = False


@dataclass(frozen=True)
class ResolvedWidget:
    title: str
    unit: str
    y_label: str
    metrics: tuple[ResolvedMetric, ...]
    lines: tuple[ReferenceLine, ...] = ()
    formulas: tuple[ResolvedFormula, ...] = ()
    right_label: str = ""
    right_lines: tuple[ReferenceLine, ...] = ()
    notes: tuple[str, ...] = ()


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
    elif metric.source is SOURCE_STREAM:
        namespace = KINESIS_NAMESPACE
        dimensions["StreamName"] = settings.source.kinesis_stream_name
    else:  # pragma: no cover - every Source of tools.dashboard.widgets is handled above
        raise AssertionError(metric.source)
    per = metric.source.per
    return ResolvedMetric(
        namespace=namespace,
        name=metric.name,
        statistic=metric.statistic,
        label=metric.label,
        dimensions=tuple(sorted(dimensions.items())),
        per=per,
        across=None if metric.each or per is None else ACROSS[metric.fold],
        per_second=metric.per_second,
    )


def resolve_formula(
    formula: Formula, settings: Settings, period: int = DASHBOARD_PERIOD_SECONDS
) -> ResolvedFormula:
    """``(term x factor + ...) / over`` in metric math over the fleet's lines (SEARCH per worker)."""
    terms = " + ".join(
        resolve_metric(metric, settings).fleet_line(period) + ("" if factor == 1 else f" * {factor:.6g}")
        for metric, factor in formula.terms
    )
    expression = f"({terms})"
    if formula.over is not None:
        expression = f"{expression} / {resolve_metric(formula.over, settings).fleet_line(period)}"
    return ResolvedFormula(formula.label, expression, formula.right)


def resolve(widget: Widget, settings: Settings) -> ResolvedWidget:
    lines = reference_lines(settings)
    return ResolvedWidget(
        widget.title,
        widget.unit,
        widget.y_label,
        tuple(resolve_metric(m, settings) for m in widget.cloud_metrics),
        tuple(lines[r] for r in widget.references if r in lines),
        tuple(resolve_formula(f, settings) for f in widget.formulas),
        widget.right_label,
        tuple(lines[r] for r in widget.right_references if r in lines),
        widget.cloud_notes(),
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


def _formula_line(formula: ResolvedFormula, period: int) -> cloudwatch.IMetric:
    return cloudwatch.MathExpression(
        expression=formula.expression, using_metrics={}, label=formula.label, period=Duration.seconds(period)
    )


def graph_widget(spec: ResolvedWidget, period: int = DASHBOARD_PERIOD_SECONDS) -> cloudwatch.GraphWidget:
    """One dashboard graph from its resolved definition (formulas on the right axis where they say so)."""
    left = [graph_metric(metric, period, i) for i, metric in enumerate(spec.metrics)]
    left += [_formula_line(f, period) for f in spec.formulas if not f.right]
    right = [_formula_line(f, period) for f in spec.formulas if f.right]
    annotations = [cloudwatch.HorizontalAnnotation(value=line.value, label=line.label) for line in spec.lines]
    return cloudwatch.GraphWidget(
        title=spec.title,
        left=left,
        right=right or None,
        left_y_axis=cloudwatch.YAxisProps(label=spec.y_label, show_units=False, min=0),
        right_y_axis=cloudwatch.YAxisProps(label=spec.right_label, show_units=False, min=0)
        if spec.right_label
        else None,
        left_annotations=annotations,
        right_annotations=[
            cloudwatch.HorizontalAnnotation(value=line.value, label=line.label) for line in spec.right_lines
        ]
        or None,
        width=12,
        height=6,
    )


NOTE_HEIGHT = 2  # grid rows of the text block under a graph


def note_markdown(spec: ResolvedWidget) -> str:
    """The text under a graph: why a line can be missing, and what the panel means."""
    return "\n".join(f"* {note}" for note in spec.notes)


def panel(spec: ResolvedWidget, period: int = DASHBOARD_PERIOD_SECONDS) -> cloudwatch.IWidget:
    """The graph, with its notes under it when it has any (one column, 12 wide). A widget with no
    line in this environment (its feature is off here) is a text panel under the same title saying
    which setting turned it off: a graph with no metrics would be an empty frame."""
    if not spec.metrics and not spec.formulas:
        return cloudwatch.TextWidget(markdown=f"### {spec.title}\n{note_markdown(spec)}", width=12, height=6)
    graph = graph_widget(spec, period)
    if not spec.notes:
        return graph
    text = cloudwatch.TextWidget(markdown=note_markdown(spec), width=12, height=NOTE_HEIGHT)
    # A Column is an IWidget in CDK (jsii); its Python class does not declare the protocol's members.
    return cast(cloudwatch.IWidget, cloudwatch.Column(graph, text))

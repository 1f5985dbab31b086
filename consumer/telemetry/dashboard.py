"""Render the dashboard's widgets from EMF documents into one PNG and an HTML page.

Time: the x axis counts seconds from ``start_millis`` (``consumer demo`` passes its own t+0, so the
dashboard and the demo's events share one clock; without it, t = 0 is the start of the first
document's period). A document stamped T aggregates its publisher's flush period (T - bucket, T],
so it is counted in the bucket that holds the middle of that period; a point at x stands for the
bucket [x, x + bucket). Each widget's statistic is applied per bucket over every document of that
bucket, so a metric published by several workers or shards adds up the way CloudWatch adds it.

What is drawn is :data:`consumer.telemetry.widgets.WIDGETS`, the list the CloudWatch dashboard
draws too, by the rules stated there:

* counters (``Sum`` metrics) as rates per second (the bucket's sum / its length), with zero where
  a bucket got no document: nothing was counted there, and a line must not bridge the gap;
* gauges (``Maximum`` / ``Average``) as they were published; a bucket a publisher skipped (a
  paused or killed worker) breaks its line rather than joining the points around it;
* only metrics the EMF documents hold (a local source); a widget with none says so inside its
  panel ("not available locally", naming where CloudWatch gets its numbers), and an empty panel
  says which metrics it waited for;
* a reference line (2N, the lag alarm) far above everything drawn is named in the legend instead
  of drawn, so that a 19-hour lag alarm does not flatten a few seconds of lag into the axis.

The HTML page lists, per publisher, the totals of counters and the latest (and highest) value of
gauges: adding up a gauge's samples means nothing.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads

from consumer.telemetry.errors import DashboardError
from consumer.telemetry.metric_names import LOAD_GENERATOR_OPERATION, Aggregation, spec_for
from consumer.telemetry.readback import MetricPoint
from consumer.telemetry.widgets import WIDGETS, Metric, Reference, ReferenceLine, Statistic, Widget

Series = dict[float, float]  # bucket start, seconds since the axis' start -> value
# A reference line above this multiple of the highest value drawn is named, not drawn.
OFF_SCALE_FACTOR = 10.0


@dataclass(frozen=True)
class RenderedDashboard:
    png: Path
    html: Path
    workers: tuple[str, ...]
    titles: tuple[str, ...]  # the panels' titles, read back from the figure, in order


@dataclass(frozen=True)
class TimeAxis:
    """Buckets of ``bucket_seconds`` counted from ``start_millis`` (t = 0)."""

    start_millis: int
    bucket_seconds: float

    def bucket_of(self, timestamp_millis: int) -> float:
        """The bucket of a document stamped ``timestamp_millis`` (the middle of its period)."""
        middle = (timestamp_millis - self.start_millis) / 1000 - self.bucket_seconds / 2
        return math.floor(middle / self.bucket_seconds) * self.bucket_seconds

    def span(self, points: Iterable[MetricPoint]) -> list[float]:
        """Every bucket from the first document's to the last one's, empty ones included."""
        buckets = {self.bucket_of(p.timestamp_millis) for p in points}
        if not buckets:
            return []
        first = round(min(buckets) / self.bucket_seconds)
        last = round(max(buckets) / self.bucket_seconds)
        return [k * self.bucket_seconds for k in range(first, last + 1)]


def time_axis(
    points: Sequence[MetricPoint], bucket_seconds: float, start_millis: int | None = None
) -> TimeAxis:
    """The axis for ``points``: from ``start_millis``, else from the first document's period start."""
    if start_millis is None:
        first = min((p.timestamp_millis for p in points), default=0)
        start_millis = first - round(bucket_seconds * 1000)
    return TimeAxis(start_millis, bucket_seconds)


def _apply(statistic: Statistic, values: list[float]) -> float:
    if statistic == "Sum":
        return sum(values)
    if statistic == "Maximum":
        return max(values)
    if statistic == "Minimum":
        return min(values)
    return sum(values) / len(values)


def series_for(
    points: Sequence[MetricPoint],
    name: str,
    statistic: Statistic,
    bucket_seconds: float,
    worker: str | None = None,
    *,
    start_millis: int | None = None,
    operation: str | None = None,
) -> Series:
    """One metric's time series: the statistic over each bucket (optionally for one worker, and
    only documents of ``operation`` when given).

    Only buckets that got a document appear; :func:`per_second` and :func:`with_gaps` decide what
    the missing ones mean.
    """
    if not points:
        return {}
    axis = time_axis(points, bucket_seconds, start_millis)
    buckets: dict[float, list[float]] = defaultdict(list)
    for point in points:
        if point.name != name or (worker is not None and point.worker != worker):
            continue
        if operation is not None and point.operation != operation:
            continue
        buckets[axis.bucket_of(point.timestamp_millis)].extend(point.values)
    return {t: _apply(statistic, values) for t, values in sorted(buckets.items())}


def per_second(sums: Series, bucket_seconds: float, buckets: Sequence[float]) -> Series:
    """A counter's sums per bucket as a rate per second over ``buckets``; zero where none came."""
    return {t: sums.get(t, 0.0) / bucket_seconds for t in buckets}


def with_gaps(series: Series, bucket_seconds: float) -> Series:
    """A gauge over its own first..last bucket, NaN where a bucket got nothing (the line breaks)."""
    if not series:
        return {}
    first = round(min(series) / bucket_seconds)
    last = round(max(series) / bucket_seconds)
    filled: Series = {}
    for k in range(first, last + 1):
        t = k * bucket_seconds
        filled[t] = series.get(t, math.nan)
    return filled


def fleet_workers(points: Iterable[MetricPoint]) -> tuple[str, ...]:
    """The workers of the fleet: every ``WorkerIdentifier`` but the load generator's."""
    return tuple(sorted({p.worker for p in points if p.worker and p.operation != LOAD_GENERATOR_OPERATION}))


def render(
    points: Sequence[MetricPoint],
    out_png: str | Path,
    *,
    bucket_seconds: float,
    references: Mapping[Reference, ReferenceLine],
    title: str,
    widgets: Sequence[Widget] = WIDGETS,
    start_millis: int | None = None,
) -> RenderedDashboard:
    """Draw ``widgets`` (the environment's list, :func:`consumer.telemetry.widgets.widgets_for`)."""
    if not points:
        raise DashboardError("no metrics to draw: no EMF documents were found in the source")
    workers = fleet_workers(points)
    palette = plt.get_cmap("tab10")
    colours = {worker: palette(i % 10) for i, worker in enumerate(workers)}
    axis_of_time = time_axis(points, bucket_seconds, start_millis)
    time_label = (
        f"t+ seconds since start (each point: the next {bucket_seconds:g} s)"
        if start_millis is not None
        else f"seconds since the first period (each point: the next {bucket_seconds:g} s)"
    )
    columns = 2
    rows = (len(widgets) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(14, 3.4 * rows), squeeze=False)
    for index, widget in enumerate(widgets):
        axis = axes[index // columns][index % columns]
        draw_widget(
            axis,
            widget,
            points=points,
            time=axis_of_time,
            references=references,
            colours=colours,
        )
        axis.set_xlabel(time_label, fontsize=8)
    for index in range(len(widgets), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    titles = tuple(axes[i // columns][i % columns].get_title() for i in range(len(widgets)))
    figure.suptitle(title, fontsize=13)
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    png = Path(out_png)
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=90)
    plt.close(figure)
    page = png.with_suffix(".html")
    page.write_text(_html(title, png.name, points), encoding="utf-8")
    return RenderedDashboard(png, page, workers, titles)


def draw_widget(
    axis: Any,
    widget: Widget,
    *,
    points: Sequence[MetricPoint],
    time: TimeAxis,
    references: Mapping[Reference, ReferenceLine],
    colours: Mapping[str, Any],
) -> None:
    axis.set_title(widget.title, fontsize=10)
    axis.set_ylabel(widget.y_label, fontsize=8)
    metrics = widget.local_metrics
    if not metrics:
        _not_available_locally(axis, widget)
        return
    bucket = time.bucket_seconds
    span = time.span(points)

    def shaped(metric: Metric, worker: str | None) -> Series:
        raw = series_for(
            points,
            metric.name,
            metric.statistic,
            bucket,
            worker,
            start_millis=time.start_millis,
            operation=metric.operation,
        )
        if not raw:
            return {}
        return per_second(raw, bucket, span) if metric.per_second else with_gaps(raw, bucket)

    drawn: list[float] = []
    for metric in metrics:
        lines: list[tuple[Series, str, Any]] = []
        if metric.each:
            for worker, colour in colours.items():
                label = worker if len(metrics) == 1 else f"{metric.label} ({worker})"
                lines.append((shaped(metric, worker), label, colour))
        else:
            lines.append((shaped(metric, None), metric.label, None))
        for series, label, colour in lines:
            if series:
                axis.plot(list(series), list(series.values()), marker=".", color=colour, label=label)
                drawn += [v for v in series.values() if not math.isnan(v)]
    if not drawn:
        _empty(axis, "no data points for", [m.name for m in metrics])
        return
    top = max(drawn)
    for reference in widget.references:
        line = references[reference]
        if 0 < line.value <= OFF_SCALE_FACTOR * top:
            axis.axhline(line.value, color="grey", linestyle="--", label=line.label)
        else:
            axis.plot(
                [],
                [],
                color="grey",
                linestyle="--",
                label=f"{line.label} at {line.value:,.0f} (off the chart)",
            )
    if all(m.per_second for m in metrics):
        axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="best")


def _not_available_locally(axis: Any, widget: Widget) -> None:
    """A widget whose every metric comes from AWS: the panel names where CloudWatch gets them."""
    sources = sorted({m.source.description for m in widget.metrics})
    _empty(axis, "not available locally: from", [*sources, *(m.name for m in widget.metrics)])


def _empty(axis: Any, heading: str, names: Sequence[str]) -> None:
    """An empty panel: why, and which metrics, wrapped to stay inside the panel."""
    lines = [heading] + [line for name in names for line in textwrap.wrap(name, width=40)]
    axis.text(
        0.5,
        0.5,
        "\n".join(lines),
        ha="center",
        va="center",
        fontsize=8,
        color="dimgrey",
        transform=axis.transAxes,
        clip_on=True,
    )
    axis.set_xticks([])
    axis.set_yticks([])


def _is_timing(point: MetricPoint) -> bool:
    """Timed operations (``<prefix>.Time`` / ``.Success``) are samples: neither counted nor a level."""
    return point.name.endswith((".Success", ".Time"))


def is_gauge(point: MetricPoint) -> bool:
    """A level (leases held, workers seen, CPU, memory): its latest value means something, its
    sum does not. Metrics outside the catalogue are gauges unless counted in Count or Bytes."""
    spec = spec_for(point.name)
    if spec is not None:
        return spec.aggregation in (Aggregation.LAST, Aggregation.MAX)
    return point.unit not in ("Count", "Bytes") and not _is_timing(point)


def is_counter(point: MetricPoint) -> bool:
    spec = spec_for(point.name)
    if spec is not None:
        return spec.aggregation is Aggregation.SUM
    return point.unit in ("Count", "Bytes") and not _is_timing(point)


@dataclass
class GaugeFigure:
    latest_millis: int = -1
    latest: float = 0.0
    highest: float = -math.inf

    def add(self, timestamp_millis: int, values: Sequence[float]) -> None:
        if not values:
            return
        self.highest = max(self.highest, *values)
        if timestamp_millis >= self.latest_millis:
            self.latest_millis, self.latest = timestamp_millis, values[-1]


def html_tables(
    points: Sequence[MetricPoint],
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], GaugeFigure]]:
    """Per (metric, publisher): the total of each counter, the latest and highest of each gauge.

    A gauge published for several shards in one period (MillisBehindLatest) counts with its
    highest value of that period, as the dashboard's per-worker panels draw it.
    """
    totals: dict[tuple[str, str], float] = defaultdict(float)
    per_period: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for point in points:
        if not point.worker:
            continue
        if is_counter(point):
            totals[(point.name, point.worker)] += sum(point.values)
        elif is_gauge(point) and point.values:
            per_period[(point.name, point.worker, point.timestamp_millis)].append(point.values[-1])
    gauges: dict[tuple[str, str], GaugeFigure] = defaultdict(GaugeFigure)
    for (name, worker, stamp), values in sorted(per_period.items(), key=lambda kv: kv[0][2]):
        gauges[(name, worker)].add(stamp, [max(values)])
    return dict(totals), dict(gauges)


def _html(title: str, png_name: str, points: Sequence[MetricPoint]) -> str:
    totals, gauges = html_tables(points)
    publishers = sorted({w for _, w in totals} | {w for _, w in gauges})
    header = "".join(f"<th>{html.escape(w)}</th>" for w in publishers)

    def table(rows: str) -> str:
        return f"<table border='1'><tr><th>metric</th>{header}</tr>{rows}</table>"

    counter_rows = "".join(
        f"<tr><td>{html.escape(n)}</td>"
        + "".join(f"<td>{totals[(n, w)]:,.0f}</td>" if (n, w) in totals else "<td></td>" for w in publishers)
        + "</tr>"
        for n in sorted({name for name, _ in totals})
    )
    gauge_rows = "".join(
        f"<tr><td>{html.escape(n)}</td>"
        + "".join(
            f"<td>{gauges[(n, w)].latest:,.4g} (max {gauges[(n, w)].highest:,.4g})</td>"
            if (n, w) in gauges
            else "<td></td>"
            for w in publishers
        )
        + "</tr>"
        for n in sorted({name for name, _ in gauges})
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1><img src='{html.escape(png_name)}' alt='dashboard'>"
        f"<h2>Counters: totals per publisher</h2>{table(counter_rows)}"
        f"<h2>Gauges: latest value per publisher (highest in brackets)</h2>{table(gauge_rows)}"
        "</body></html>\n"
    )

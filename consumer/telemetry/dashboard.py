"""Render the dashboard's widgets from EMF documents into one PNG and an HTML page.

Time: the x axis counts seconds from ``start_millis`` (``consumer demo`` passes its own t+0, so the
dashboard and the demo's events share one clock; without it, t = 0 is the start of the first
document's period). A document stamped T aggregates its publisher's flush period (T - bucket, T],
so it is counted in the bucket that holds the middle of that period; a point at x stands for the
bucket [x, x + bucket). Each widget's statistic is applied per bucket over every document of that
bucket, so a metric published by several workers or shards adds up the way CloudWatch adds it.

What is drawn:

* counters (``Sum`` widgets) as rates per second (the bucket's sum / its length), with zero where
  a bucket got no document: nothing was counted there, and a line must not bridge the gap;
* gauges (``Maximum`` / ``Average``) as they were published; a bucket a publisher skipped (a
  paused or killed worker) breaks its line rather than joining the points around it;
* an empty panel says which metrics it waited for, inside the panel.

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
from consumer.telemetry.widgets import WIDGETS, Statistic, Widget

Series = dict[float, float]  # bucket start, seconds since the axis' start -> value


@dataclass(frozen=True)
class RenderedDashboard:
    png: Path
    html: Path
    workers: tuple[str, ...]


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
    return sum(values) / len(values)


def series_for(
    points: Sequence[MetricPoint],
    name: str,
    statistic: Statistic,
    bucket_seconds: float,
    worker: str | None = None,
    *,
    start_millis: int | None = None,
) -> Series:
    """One metric's time series: the statistic over each bucket (optionally for one worker).

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
    expected_partitions: int,
    title: str,
    widgets: Sequence[Widget] = WIDGETS,
    start_millis: int | None = None,
) -> RenderedDashboard:
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
            expected_partitions=expected_partitions,
            colours=colours,
        )
        axis.set_xlabel(time_label, fontsize=8)
    for index in range(len(widgets), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    figure.suptitle(title, fontsize=13)
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    png = Path(out_png)
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=90)
    plt.close(figure)
    page = png.with_suffix(".html")
    page.write_text(_html(title, png.name, points), encoding="utf-8")
    return RenderedDashboard(png, page, workers)


def y_label(widget: Widget) -> str:
    if widget.statistic == "Sum":
        return f"per second ({widget.unit}/s)"
    return f"{widget.statistic} ({widget.unit})"


def draw_widget(
    axis: Any,
    widget: Widget,
    *,
    points: Sequence[MetricPoint],
    time: TimeAxis,
    expected_partitions: int,
    colours: Mapping[str, Any],
) -> None:
    bucket = time.bucket_seconds
    span = time.span(points)
    rate = widget.statistic == "Sum"

    def shaped(name: str, worker: str | None) -> Series:
        raw = series_for(points, name, widget.statistic, bucket, worker, start_millis=time.start_millis)
        if not raw:
            return {}
        return per_second(raw, bucket, span) if rate else with_gaps(raw, bucket)

    drawn = False
    if widget.per_worker:
        for worker, colour in colours.items():
            series = shaped(widget.metrics[0], worker)
            if series:
                axis.plot(list(series), list(series.values()), marker=".", color=colour, label=worker)
                drawn = True
    else:
        for name in widget.metrics:
            series = shaped(name, None)
            if series:
                label = f"{name} (per second)" if rate else f"{name} ({widget.statistic})"
                axis.plot(list(series), list(series.values()), marker=".", label=label)
                drawn = True
    if widget.reference == "two_n" and drawn:
        axis.axhline(
            2 * expected_partitions, color="grey", linestyle="--", label=f"2N = {2 * expected_partitions}"
        )
    axis.set_title(widget.title, fontsize=10)
    axis.set_ylabel(y_label(widget), fontsize=8)
    axis.grid(alpha=0.3)
    if drawn:
        if rate:
            axis.set_ylim(bottom=0)
        axis.legend(fontsize=7, loc="best")
    else:
        _empty(axis, widget)


def _empty(axis: Any, widget: Widget) -> None:
    """An empty panel: which metrics it waited for, wrapped to stay inside the panel."""
    lines = ["no data points for"] + [
        line for name in widget.metrics for line in textwrap.wrap(name, width=40)
    ]
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

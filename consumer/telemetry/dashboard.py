"""Render the dashboard's widgets from EMF documents into one PNG and an HTML page.

Points are bucketed by flush period (the x axis is time since the first document); each widget's
statistic is applied per bucket over every document of that bucket, so a metric published by
several workers or shards adds up the way CloudWatch would add it.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads

from consumer.telemetry.errors import DashboardError
from consumer.telemetry.readback import MetricPoint
from consumer.telemetry.widgets import WIDGETS, Statistic, Widget

Series = dict[float, float]  # seconds since start -> value


@dataclass(frozen=True)
class RenderedDashboard:
    png: Path
    html: Path
    workers: tuple[str, ...]


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
) -> Series:
    """One metric's time series: the statistic over each bucket (optionally for one worker)."""
    if not points:
        return {}
    start = min(p.timestamp_millis for p in points)
    buckets: dict[float, list[float]] = defaultdict(list)
    for point in points:
        if point.name != name or (worker is not None and point.worker != worker):
            continue
        bucket = ((point.timestamp_millis - start) / 1000) // bucket_seconds * bucket_seconds
        buckets[bucket].extend(point.values)
    return {t: _apply(statistic, values) for t, values in sorted(buckets.items())}


def render(
    points: Sequence[MetricPoint],
    out_png: str | Path,
    *,
    bucket_seconds: float,
    expected_partitions: int,
    title: str,
    widgets: Sequence[Widget] = WIDGETS,
) -> RenderedDashboard:
    if not points:
        raise DashboardError("no metrics to draw: no EMF documents were found in the source")
    workers = tuple(sorted({p.worker for p in points if p.worker}))
    palette = plt.get_cmap("tab10")
    colours = {worker: palette(i % 10) for i, worker in enumerate(workers)}
    columns = 2
    rows = (len(widgets) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(14, 3.4 * rows), squeeze=False)
    for index, widget in enumerate(widgets):
        axis = axes[index // columns][index % columns]
        _draw(
            axis,
            widget,
            points=points,
            bucket_seconds=bucket_seconds,
            expected_partitions=expected_partitions,
            colours=colours,
        )
    for index in range(len(widgets), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    figure.suptitle(title, fontsize=13)
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    png = Path(out_png)
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=90)
    plt.close(figure)
    page = png.with_suffix(".html")
    page.write_text(_html(title, png.name, points, workers), encoding="utf-8")
    return RenderedDashboard(png, page, workers)


def _draw(
    axis: Any,
    widget: Widget,
    *,
    points: Sequence[MetricPoint],
    bucket_seconds: float,
    expected_partitions: int,
    colours: Mapping[str, Any],
) -> None:
    drawn = False
    if widget.per_worker:
        for worker, colour in colours.items():
            series = series_for(points, widget.metrics[0], widget.statistic, bucket_seconds, worker)
            if series:
                axis.plot(list(series), list(series.values()), marker=".", color=colour, label=worker)
                drawn = True
    else:
        for name in widget.metrics:
            series = series_for(points, name, widget.statistic, bucket_seconds)
            if series:
                axis.plot(
                    list(series), list(series.values()), marker=".", label=f"{name} ({widget.statistic})"
                )
                drawn = True
    if widget.reference == "two_n":
        axis.axhline(
            2 * expected_partitions, color="grey", linestyle="--", label=f"2N = {2 * expected_partitions}"
        )
    if not drawn:
        missing = ", ".join(widget.metrics)
        axis.text(0.5, 0.5, f"no data yet ({missing})", ha="center", va="center", transform=axis.transAxes)
    axis.set_title(widget.title, fontsize=10)
    axis.set_xlabel("time since start (s)")
    axis.set_ylabel(f"{widget.statistic} ({widget.unit}) per {bucket_seconds:g} s")
    axis.grid(alpha=0.3)
    if drawn or widget.reference:
        axis.legend(fontsize=7, loc="best")


def _html(title: str, png_name: str, points: Sequence[MetricPoint], workers: Sequence[str]) -> str:
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for point in points:
        if point.unit in ("Count", "Bytes") and point.worker:
            totals[(point.name, point.worker)] += sum(point.values)
    names = sorted({name for name, _ in totals})
    header = "".join(f"<th>{html.escape(w)}</th>" for w in workers)
    rows = "".join(
        f"<tr><td>{html.escape(n)}</td>"
        + "".join(f"<td>{totals.get((n, w), 0):,.0f}</td>" for w in workers)
        + "</tr>"
        for n in names
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1><img src='{html.escape(png_name)}' alt='dashboard'>"
        f"<h2>Totals per worker (counts and bytes)</h2><table border='1'><tr><th>metric</th>{header}</tr>"
        f"{rows}</table></body></html>\n"
    )

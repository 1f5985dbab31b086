"""Render the dashboard's widgets from EMF documents into one PNG and an HTML page.

What is drawn is :data:`consumer.telemetry.widgets.WIDGETS`, the list the CloudWatch dashboard
draws too, by the rules stated there; the time series come from :mod:`consumer.telemetry.series`:

* counters (``Sum`` metrics) as rates per second (the bucket's sum / its length), with zero where
  a bucket got no document: nothing was counted there, and a line must not bridge the gap;
* gauges (``Maximum`` / ``Average``) as they were published; a bucket a publisher skipped (a
  paused or killed worker) breaks its line rather than joining the points around it;
* formulas (the cost panel) computed from those lines, against the right axis where they say so;
* every axis from zero, so a gauge that moves by a few percent does not read as growth;
* only metrics the EMF documents hold (a local source). Every line a panel lacks is named under it
  with the reason (the metric's ``absent``, its AWS source, the setting that turned it off), a
  panel with nothing to draw says so in its middle, and a line missing without a reason is
  reported as unexplained (:class:`~consumer.telemetry.dashboard_page.PanelState`);
* a reference line (2N, the lag alarm) far above everything drawn is named in the legend instead
  of drawn, so that a 19-hour lag alarm does not flatten a few seconds of lag into the axis.

The HTML page (:mod:`consumer.telemetry.dashboard_page`) lists each panel's lines and notes, and
per publisher the totals of counters and the latest (and highest) value of gauges.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads

from consumer.telemetry.dashboard_page import PanelState, page_html
from consumer.telemetry.errors import DashboardError
from consumer.telemetry.readback import MetricPoint
from consumer.telemetry.series import (
    Series,
    TimeAxis,
    fleet_workers,
    formula_series,
    metric_series,
    per_second,
    series_for,
    time_axis,
    with_gaps,
)
from consumer.telemetry.widgets import WIDGETS, WORKER, Metric, Reference, ReferenceLine, Widget

__all__ = [
    "PanelState",
    "RenderedDashboard",
    "Series",
    "TimeAxis",
    "draw_widget",
    "fleet_workers",
    "per_second",
    "render",
    "series_for",
    "time_axis",
    "with_gaps",
]

# A reference line above this multiple of the highest value drawn is named, not drawn.
OFF_SCALE_FACTOR = 10.0
NOTE_WIDTH = 100  # characters per line of a panel's notes


@dataclass(frozen=True)
class RenderedDashboard:
    png: Path
    html: Path
    workers: tuple[str, ...]
    titles: tuple[str, ...]  # the panels' titles, read back from the figure, in order
    panels: tuple[PanelState, ...] = ()


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
    figure, axes = plt.subplots(rows, columns, figsize=(14, 3.9 * rows), squeeze=False)
    panels = []
    for index, widget in enumerate(widgets):
        axis = axes[index // columns][index % columns]
        panels.append(
            draw_widget(
                axis,
                widget,
                points=points,
                time=axis_of_time,
                references=references,
                colours=colours,
                time_label=time_label,
            )
        )
    for index in range(len(widgets), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    titles = tuple(axes[i // columns][i % columns].get_title() for i in range(len(widgets)))
    figure.suptitle(title, fontsize=13)
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    png = Path(out_png)
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=90)
    plt.close(figure)
    page = png.with_suffix(".html")
    page.write_text(page_html(title, png.name, points, panels), encoding="utf-8")
    return RenderedDashboard(png, page, workers, titles, tuple(panels))


def _from_aws(metrics: Sequence[Metric]) -> list[str]:
    """One note per source the local run cannot read, naming its lines and metrics."""
    by_source: dict[str, list[str]] = {}
    for metric in metrics:
        by_source.setdefault(metric.source.description, []).append(f"{metric.label} ({metric.name})")
    return [
        f"{', '.join(lines)}: from {source}, not available locally" for source, lines in by_source.items()
    ]


def _text(text: str) -> str:
    """Text as matplotlib should print it (a $ starts mathematics there)."""
    return text.replace("$", r"\$")


def draw_widget(
    axis: Any,
    widget: Widget,
    *,
    points: Sequence[MetricPoint],
    time: TimeAxis,
    references: Mapping[Reference, ReferenceLine],
    colours: Mapping[str, Any],
    time_label: str = "",
) -> PanelState:
    """Draw one panel; returns what it shows (lines with data, notes, unexplained gaps)."""
    axis.set_title(widget.title, fontsize=10)
    axis.set_ylabel(widget.y_label, fontsize=8)
    notes: list[str] = [*widget.off]
    unexplained: list[str] = []
    remote: list[Metric] = []
    drawn: list[float] = []
    lines = 0
    for metric in widget.metrics:
        series_drawn = 0
        if metric.source.local:
            targets = list(colours.items()) if metric.each else [(None, None)]
            for worker, colour in targets:
                series = metric_series(points, metric, time, worker)
                if not series:
                    continue
                label = metric.label if worker is None else worker
                if metric.each and len(widget.metrics) > 1:
                    label = f"{metric.label} ({worker})"
                axis.plot(list(series), list(series.values()), marker=".", color=colour, label=_text(label))
                drawn += [v for v in series.values() if not math.isnan(v)]
                series_drawn += 1
        lines += series_drawn
        if series_drawn:
            continue
        if not metric.source.local:
            remote.append(metric)
        elif metric.absent:
            notes.append(f"{metric.label}: {metric.absent}")
            lines += _none_counted(axis, metric, points, time, colours)
        else:
            unexplained.append(metric.name)
    notes += _from_aws(remote)
    right_axis: Any = None
    right_drawn: list[float] = []
    for index, formula in enumerate(widget.formulas):
        series = formula_series(points, formula, time) if formula.local else {}
        if series:
            if formula.right and right_axis is None:
                right_axis = axis.twinx()
            target = right_axis if formula.right else axis
            style = "--" if formula.right else "-"
            colour = f"C{index + 2}"
            values = list(series.values())
            target.plot(
                list(series), values, marker=".", linestyle=style, color=colour, label=_text(formula.label)
            )
            (right_drawn if formula.right else drawn).extend(v for v in series.values() if not math.isnan(v))
            lines += 1
        elif not formula.local:
            sources = ", ".join(sorted({m.source.description for m in formula.metrics if not m.source.local}))
            notes.append(f"{formula.label}: from {sources}, not available locally")
        elif formula.absent:
            notes.append(f"{formula.label}: {formula.absent}")
        else:
            unexplained.append(formula.label)
    if widget.note:
        notes.append(widget.note)
    notes = list(dict.fromkeys(notes))
    if not lines:
        missing = [f"no data points for {name} (unexplained)" for name in unexplained]
        _say(axis, "nothing to draw here:", notes + missing)
        return PanelState(widget.title, 0, tuple(notes), tuple(unexplained))
    _references(axis, widget.references, references, drawn)
    if widget.right_references or right_axis is not None:
        right_axis = right_axis if right_axis is not None else axis.twinx()
        _references(right_axis, widget.right_references, references, right_drawn or [0.0])
        right_axis.set_ylabel(_text(widget.right_label), fontsize=8)
        right_axis.set_ylim(bottom=0)
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    handles, labels = axis.get_legend_handles_labels()
    if right_axis is not None:
        more, more_labels = right_axis.get_legend_handles_labels()
        handles, labels = handles + more, labels + more_labels
    if handles:
        axis.legend(handles, labels, fontsize=7, loc="best")
    shown = notes + [f"no data points for {name} (unexplained)" for name in unexplained]
    wrapped = [_text(line) for note in shown for line in textwrap.wrap(note, NOTE_WIDTH)]
    axis.set_xlabel("\n".join([time_label, *wrapped]) if time_label else "\n".join(wrapped), fontsize=7)
    return PanelState(widget.title, lines, tuple(notes), tuple(unexplained))


def _none_counted(
    axis: Any, metric: Metric, points: Sequence[MetricPoint], time: TimeAxis, colours: Mapping[str, Any]
) -> int:
    """A counter of events the workers count when they happen (retries, throttles, trimmed
    records), and none happened: zero through every period the fleet published in, which is what
    the run says about it (an empty frame would not). Returns the lines drawn (0 or 1)."""
    if not (metric.per_second and metric.source is WORKER and not metric.each):
        return 0
    span = time.span(p for p in points if p.worker in colours)
    if not span:
        return 0
    axis.plot(span, [0.0] * len(span), marker=".", label=_text(f"{metric.label}: none"))
    return 1


def _references(
    axis: Any,
    wanted: Sequence[Reference],
    references: Mapping[Reference, ReferenceLine],
    drawn: Sequence[float],
) -> None:
    top = max(drawn, default=0.0)
    for reference in wanted:
        line = references.get(reference)
        if line is None:  # not in this environment (a provisioned table's price, on demand)
            continue
        if 0 < line.value <= OFF_SCALE_FACTOR * max(top, 1e-9) or top == 0:
            axis.axhline(line.value, color="grey", linestyle="--", label=_text(line.label))
        else:
            axis.plot(
                [],
                [],
                color="grey",
                linestyle="--",
                label=_text(f"{line.label} at {line.value:,.0f} (off the chart)"),
            )


def _say(axis: Any, heading: str, notes: Sequence[str]) -> None:
    """An empty panel: why, wrapped to stay inside the panel."""
    lines = [heading] + [_text(line) for note in notes for line in textwrap.wrap(note, width=60)]
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

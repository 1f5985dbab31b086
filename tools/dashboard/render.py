"""Render the dashboard's widgets from EMF documents into one PNG and an HTML page.

What is drawn is :data:`tools.dashboard.widgets.WIDGETS`, the list the CloudWatch dashboard
draws too, by the rules stated there; the time series come from :mod:`tools.dashboard.series`:

* counters (``Sum`` metrics) as rates per second (the bucket's sum / its length), with zero where
  a bucket got no document: nothing was counted there, and a line must not bridge the gap;
* gauges (``Maximum`` / ``Average``) as they were published; a bucket a publisher skipped (a
  paused or killed worker) breaks its line rather than joining the points around it;
* formulas (the cost panel) computed from those lines, against the right axis where they say so;
* every axis from zero, so a gauge that moves by a few percent does not read as growth;
* only metrics the EMF documents hold (a local source). Every line a panel lacks is named under it
  with the reason (the metric's ``absent``, its AWS source, the setting that turned it off), a
  panel with nothing to draw says so in its middle, and a line missing without a reason is
  reported as unexplained (:class:`~tools.dashboard.page.PanelState`);
* a reference line (2N, the lag alarm) far above everything drawn is named in the legend instead
  of drawn, so that a 19-hour lag alarm does not flatten a few seconds of lag into the axis.

The HTML page (:mod:`tools.dashboard.page`) lists each panel's lines and notes, and
per publisher the totals of counters and the latest (and highest) value of gauges.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend must be chosen before pyplot loads

from tools.dashboard.errors import DashboardError
from tools.dashboard.page import PanelState, page_html
from tools.dashboard.panels import OFF_SCALE_FACTOR, panel_lines
from tools.dashboard.readback import MetricPoint
from tools.dashboard.series import (
    Series,
    TimeAxis,
    fleet_workers,
    per_second,
    series_for,
    time_axis,
    with_gaps,
)
from tools.dashboard.widgets import WIDGETS, Reference, ReferenceLine, Widget


def panels_of(png: str | Path) -> list[str]:
    """The panel titles a PNG drawn by :func:`render` names in its text (empty for any other PNG)."""
    from PIL import Image

    with Image.open(png) as image:
        description = image.info.get("Description", "")
    try:
        panels = json.loads(description).get("panels", [])
    except (ValueError, AttributeError):
        return []
    return [str(title) for title in panels]


__all__ = [
    "OFF_SCALE_FACTOR",
    "PanelState",
    "RenderedDashboard",
    "Series",
    "TimeAxis",
    "draw_widget",
    "fleet_workers",
    "panels_of",
    "per_second",
    "render",
    "series_for",
    "time_axis",
    "with_gaps",
]

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
    """Draw ``widgets`` (the environment's list, :func:`tools.dashboard.widgets.widgets_for`)."""
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
    # The panels' titles go into the PNG's own text (its Description), so that a picture kept in the
    # docs can be checked against the panels the dashboard draws today (tests/unit/telemetry).
    figure.savefig(png, dpi=90, metadata={"Title": title, "Description": json.dumps({"panels": titles})})
    plt.close(figure)
    page = png.with_suffix(".html")
    page.write_text(page_html(title, png.name, points, panels, bucket_seconds), encoding="utf-8")
    return RenderedDashboard(png, page, workers, titles, tuple(panels))


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
    """Draw one panel (:func:`tools.dashboard.panels.panel_lines` decides what); returns what it shows."""
    axis.set_title(widget.title, fontsize=10)
    axis.set_ylabel(widget.y_label, fontsize=8)
    panel = panel_lines(widget, points=points, time=time, references=references, workers=list(colours))
    notes = list(panel.notes)
    if not panel.lines:
        missing = [f"no data points for {name} (unexplained)" for name in panel.unexplained]
        _say(axis, "nothing to draw here:", notes + missing)
        return panel.state
    right_axis: Any = axis.twinx() if panel.right_axis else None
    for line in panel.lines:
        target = right_axis if line.right else axis
        colour = colours.get(line.worker) if line.worker is not None else None
        if line.colour_index is not None:
            colour = f"C{line.colour_index}"
        target.plot(
            list(line.series),
            list(line.series.values()),
            marker=".",
            linestyle="--" if line.dashed else "-",
            color=colour,
            label=_text(line.label),
        )
    for guide in panel.guides:
        target = right_axis if guide.right else axis
        if guide.drawn:
            target.axhline(guide.value, color="grey", linestyle="--", label=_text(guide.label))
        else:
            target.plot([], [], color="grey", linestyle="--", label=_text(guide.label))
    if right_axis is not None:
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
    shown = notes + [f"no data points for {name} (unexplained)" for name in panel.unexplained]
    wrapped = [_text(line) for note in shown for line in textwrap.wrap(note, NOTE_WIDTH)]
    axis.set_xlabel("\n".join([time_label, *wrapped]) if time_label else "\n".join(wrapped), fontsize=7)
    return panel.state


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

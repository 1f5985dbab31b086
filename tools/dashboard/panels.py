"""What one panel shows, computed once for both local renderers (the PNG and the live page).

:func:`panel_lines` turns a widget and the EMF points read back into the lines it draws (each a
series on the dashboard's clock, against the left or the right axis), the reference lines it draws
or names, and its notes: why each line it lacks is missing (the metric's ``absent``, its AWS source,
the setting that turned it off), and which metrics are missing without a reason (a fault). The PNG
(:mod:`tools.dashboard.render`) hands these to matplotlib; the live page (:mod:`tools.dashboard.live`)
sends them to the browser as JSON. One computation, so the two cannot disagree about a panel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tools.dashboard.page import PanelState
from tools.dashboard.readback import MetricPoint
from tools.dashboard.series import Series, TimeAxis, formula_series, metric_series
from tools.dashboard.widget_model import WORKER, Metric, Reference, ReferenceLine, Widget

# A reference line above this multiple of the highest value drawn is named, not drawn.
OFF_SCALE_FACTOR = 10.0


@dataclass(frozen=True)
class Line:
    """One drawn line: its label, its points, which axis, and what colours it (a worker's name for a
    per-worker line, a formula's index otherwise)."""

    label: str
    series: Series
    worker: str | None = None
    right: bool = False
    dashed: bool = False
    colour_index: int | None = None  # matplotlib's C<n> cycle, for a formula's line


@dataclass(frozen=True)
class Guide:
    """A reference line: drawn at ``value`` when it is on the chart's scale, else only named."""

    label: str
    value: float
    drawn: bool
    right: bool = False


@dataclass(frozen=True)
class PanelLines:
    widget: Widget
    lines: tuple[Line, ...]
    guides: tuple[Guide, ...]
    notes: tuple[str, ...]
    unexplained: tuple[str, ...]

    @property
    def state(self) -> PanelState:
        return PanelState(self.widget.title, len(self.lines), self.notes, self.unexplained)

    @property
    def right_axis(self) -> bool:
        return any(line.right for line in self.lines) or bool(self.widget.right_references)


def _from_aws(metrics: Sequence[Metric]) -> list[str]:
    """One note per source the local run cannot read, naming its lines and metrics."""
    by_source: dict[str, list[str]] = {}
    for metric in metrics:
        by_source.setdefault(metric.source.description, []).append(f"{metric.label} ({metric.name})")
    return [
        f"{', '.join(lines)}: from {source}, not available locally" for source, lines in by_source.items()
    ]


def _none_counted(
    metric: Metric, points: Sequence[MetricPoint], time: TimeAxis, workers: Sequence[str]
) -> Line | None:
    """A counter of events the workers count when they happen (retries, throttles, trimmed
    records), and none happened: zero through every period the fleet published in, which is what
    the run says about it (an empty frame would not)."""
    if not (metric.per_second and metric.source is WORKER and not metric.each):
        return None
    span = time.span(p for p in points if p.worker in workers)
    if not span:
        return None
    return Line(f"{metric.label}: none", dict.fromkeys(span, 0.0))


def _values(lines: Sequence[Line]) -> list[float]:
    return [v for line in lines for v in line.series.values() if not math.isnan(v)]


def _guides(
    wanted: Sequence[Reference], references: Mapping[Reference, ReferenceLine], top: float, *, right: bool
) -> list[Guide]:
    guides = []
    for reference in wanted:
        line = references.get(reference)
        if line is None:  # not in this environment (a provisioned table's price, on demand)
            continue
        drawn = 0 < line.value <= OFF_SCALE_FACTOR * max(top, 1e-9) or top == 0
        label = line.label if drawn else f"{line.label} at {line.value:,.0f} (off the chart)"
        guides.append(Guide(label, line.value, drawn, right))
    return guides


def panel_lines(
    widget: Widget,
    *,
    points: Sequence[MetricPoint],
    time: TimeAxis,
    references: Mapping[Reference, ReferenceLine],
    workers: Sequence[str],
) -> PanelLines:
    """The lines, reference lines and notes of one panel (``workers``: the fleet, in colour order)."""
    notes: list[str] = [*widget.off]
    unexplained: list[str] = []
    remote: list[Metric] = []
    lines: list[Line] = []
    for metric in widget.metrics:
        found: list[Line] = []
        if metric.source.local:
            targets: Sequence[str | None] = list(workers) if metric.each else [None]
            for worker in targets:
                series = metric_series(points, metric, time, worker)
                if not series:
                    continue
                label = metric.label if worker is None else worker
                if metric.each and len(widget.metrics) > 1:
                    label = f"{metric.label} ({worker})"
                found.append(Line(label, series, worker))
        if metric.gaps and any(math.isnan(v) for line in found for v in line.series.values()):
            notes.append(f"{metric.label}: {metric.gaps}")
        lines += found
        if found:
            continue
        if not metric.source.local:
            remote.append(metric)
        elif metric.absent:
            notes.append(f"{metric.label}: {metric.absent}")
            zero = _none_counted(metric, points, time, workers)
            if zero is not None:
                lines.append(zero)
        else:
            unexplained.append(metric.name)
    notes += _from_aws(remote)
    for index, formula in enumerate(widget.formulas):
        series = formula_series(points, formula, time) if formula.local else {}
        if series:
            lines.append(
                Line(formula.label, series, right=formula.right, dashed=formula.right, colour_index=index + 2)
            )
        elif not formula.local:
            sources = ", ".join(sorted({m.source.description for m in formula.metrics if not m.source.local}))
            notes.append(f"{formula.label}: from {sources}, not available locally")
        elif formula.absent:
            notes.append(f"{formula.label}: {formula.absent}")
        else:
            unexplained.append(formula.label)
    if widget.note:
        notes.append(widget.note)
    guides: list[Guide] = []
    if lines:
        left = [line for line in lines if not line.right]
        right = [line for line in lines if line.right]
        guides += _guides(widget.references, references, max(_values(left), default=0.0), right=False)
        if widget.right_references or right:
            top = max(_values(right), default=0.0)
            guides += _guides(widget.right_references, references, top, right=True)
    return PanelLines(widget, tuple(lines), tuple(guides), tuple(dict.fromkeys(notes)), tuple(unexplained))

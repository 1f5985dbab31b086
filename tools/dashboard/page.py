"""The dashboard's HTML page beside its PNG: what each panel says, and per publisher the totals of
counters and the latest (and highest) value of gauges: adding up a gauge's samples means nothing.

The panels' section lists, for every panel, how many lines it drew and what it says about the lines
it lacks (``consumer demo``'s test reads it: no panel may be empty without saying why).
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from consumer.api.metrics import Aggregation, spec_for
from tools.dashboard.readback import MetricPoint

UNEXPLAINED = "UNEXPLAINED"


@dataclass(frozen=True)
class PanelState:
    """What one drawn panel shows: its title, how many lines with data, its notes, and the metrics
    missing without a reason (a fault: a metric every running worker publishes did not arrive)."""

    title: str
    lines: int
    notes: tuple[str, ...]
    unexplained: tuple[str, ...] = ()

    @property
    def says_why(self) -> bool:
        """Empty panels say why; no panel lacks a line without a reason."""
        return not self.unexplained and (self.lines > 0 or bool(self.notes))


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


def stopped_early(points: Sequence[MetricPoint], period_seconds: float) -> dict[str, float]:
    """Publishers whose last document came more than two periods before the fleet's last one, and
    how many seconds before: a worker killed (or crashed) there never flushed its last period."""
    last: dict[str, int] = {}
    for point in points:
        if point.worker:
            last[point.worker] = max(last.get(point.worker, 0), point.timestamp_millis)
    if not last:
        return {}
    end = max(last.values())
    return {
        worker: (end - stamp) / 1000
        for worker, stamp in sorted(last.items())
        if end - stamp > 2 * period_seconds * 1000
    }


def counters_note(points: Sequence[MetricPoint], period_seconds: float) -> str:
    """Why the counters' totals can fall short of what the fleet did, naming who stopped early."""
    early = stopped_early(points, period_seconds)
    if not early:
        return ""
    who = ", ".join(f"{worker} ({seconds:.0f} s before the others)" for worker, seconds in early.items())
    return (
        f"Stopped publishing early: {who}. A worker killed there never flushed its last period (up to "
        f"{period_seconds:g} s of counts, metrics.flush_interval_seconds), so the totals below lack it; "
        "any record it had processed but not checkpointed is processed, and counted, again by the next holder."
    )


def page_html(
    title: str,
    png_name: str,
    points: Sequence[MetricPoint],
    panels: Sequence[PanelState],
    period_seconds: float = 60.0,
) -> str:
    """The page: the picture, each panel's lines and notes, then the counters and gauges."""
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
        f"<h2>Panels: lines drawn, and why a line is missing</h2>{_panels_table(panels)}"
        f"<h2>Counters: totals per publisher</h2>"
        + (
            f"<p id='counters-note'>{html.escape(note)}</p>"
            if (note := counters_note(points, period_seconds))
            else ""
        )
        + f"{table(counter_rows)}"
        f"<h2>Gauges: latest value per publisher (highest in brackets)</h2>{table(gauge_rows)}"
        "</body></html>\n"
    )


def _panels_table(panels: Sequence[PanelState]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(p.title)}</td><td>{p.lines}</td><td>"
        + "<br>".join(html.escape(n) for n in p.notes)
        + "".join(f"<br>{UNEXPLAINED}: no data for {html.escape(m)}" for m in p.unexplained)
        + "</td></tr>"
        for p in panels
    )
    return f"<table border='1'><tr><th>panel</th><th>lines</th><th>notes</th></tr>{rows}</table>"

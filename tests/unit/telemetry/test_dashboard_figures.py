"""What the local dashboard draws: counters as rates per second with zero for empty periods, gauges
broken (not bridged) where a publisher was silent, a time axis on the caller's clock, gauges shown
by their latest value (never added up), and empty panels whose text stays inside the panel."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tools.dashboard.readback import MetricPoint
from tools.dashboard.render import (
    draw_widget,
    fleet_workers,
    render,
    series_for,
    time_axis,
)
from tools.dashboard.widgets import WIDGETS, Reference, ReferenceLine, Widget

REFERENCES = {
    Reference.SCALE_OUT: ReferenceLine("2N = 8 (scale out)", 8.0),
    Reference.PARTITIONS: ReferenceLine("N = 4", 4.0),
    Reference.LAG_ALARM: ReferenceLine("lag alarm", 69_120_000.0),
}

START = 1_700_000_000_000
BUCKET = 5.0


def point(
    seconds: float,
    name: str,
    value: float,
    *,
    worker: str = "worker-1",
    operation: str = "ProcessTask",
    unit: str = "Count",
) -> MetricPoint:
    """One metric of a document stamped ``seconds`` after START (it covers the 5 s before)."""
    return MetricPoint(
        timestamp_millis=START + int(seconds * 1000),
        namespace="app",
        name=name,
        unit=unit,
        values=(float(value),),
        operation=operation,
        worker=worker,
        shard_id=None,
        dimension_sets=(("Operation", "WorkerIdentifier"),),
    )


def widget(title: str) -> Widget:
    (found,) = [w for w in WIDGETS if w.title == title]
    return found


def drawn_lines(widget_: Widget, points: list[MetricPoint]) -> dict[str, tuple[list[float], list[float]]]:
    figure, axis = plt.subplots()
    try:
        workers = fleet_workers(points)
        draw_widget(
            axis,
            widget_,
            points=points,
            time=time_axis(points, BUCKET, START),
            references=REFERENCES,
            colours={w: "C0" for w in workers},
        )
        assert axis.get_ylabel() == widget_.y_label
        return {
            str(line.get_label()): (
                [float(x) for x in line.get_xdata()],
                [float(y) for y in line.get_ydata()],
            )
            for line in axis.get_lines()
        }
    finally:
        plt.close(figure)


def test_counters_are_drawn_per_second_with_zero_for_a_period_without_documents() -> None:
    points = [
        point(5, "RecordsProcessed", 50),
        point(10, "RecordsProcessed", 100),
        # nothing processed between t+10 and t+15: no document in that period
        point(20, "RecordsProcessed", 25),
        point(5, "TableWrites", 200, worker="load-generator", operation="LoadGenerator"),
        point(20, "TableWrites", 100, worker="load-generator", operation="LoadGenerator"),
    ]
    records = widget("Records processed vs table writes")
    lines = drawn_lines(records, points)
    assert records.y_label.endswith("/s")
    assert lines["records processed/s"] == ([0.0, 5.0, 10.0, 15.0], [10.0, 20.0, 0.0, 5.0])
    # The writes line is drawn (the load generator publishes it), zero where it wrote nothing.
    assert lines["table writes by the load generator/s"] == ([0.0, 5.0, 10.0, 15.0], [40.0, 0.0, 0.0, 20.0])


def test_a_silent_worker_breaks_its_gauge_line_instead_of_bridging_the_gap() -> None:
    points = [
        point(5, "CurrentLeases", 2, operation="RenewAllLeases"),
        point(10, "CurrentLeases", 3, operation="RenewAllLeases"),
        point(20, "CurrentLeases", 3, operation="RenewAllLeases"),  # SIGSTOPped from t+10 to t+15
    ]
    lines = drawn_lines(widget("Current leases per worker"), points)
    xs, ys = lines["worker-1"]
    assert xs == [0.0, 5.0, 10.0, 15.0]
    assert ys[:2] == [2.0, 3.0] and math.isnan(ys[2]) and ys[3] == 3.0


def test_the_time_axis_counts_from_the_given_start() -> None:
    # A document stamped t+30 aggregates t+25..t+30: the point of bucket 25 on the caller's clock,
    # whenever the first document arrived.
    points = [point(30, "RecordsProcessed", 10), point(35, "RecordsProcessed", 10)]
    assert series_for(points, "RecordsProcessed", "Sum", BUCKET, start_millis=START) == {25.0: 10, 30.0: 10}
    # Without a start, t = 0 is the start of the first document's period.
    assert series_for(points, "RecordsProcessed", "Sum", BUCKET) == {0.0: 10, 5.0: 10}


def test_the_load_generator_is_a_publisher_not_a_worker() -> None:
    points = [
        point(5, "RecordsProcessed", 1, worker="worker-2"),
        point(5, "TableWrites", 1, worker="load-generator", operation="LoadGenerator"),
    ]
    assert fleet_workers(points) == ("worker-2",)


def test_the_page_shows_gauges_by_their_latest_value_and_counters_by_their_total(tmp_path: Path) -> None:
    points = []
    for seconds, leases in ((5, 2), (10, 3), (15, 1)):
        points += [
            point(seconds, "CurrentLeases", leases, operation="RenewAllLeases"),
            point(seconds, "NumWorkers", 4, operation="TakeLeases"),
            point(seconds, "RecordsProcessed", 100),
            point(seconds, "RenewLease.Time", 12, operation="RenewAllLeases", unit="Milliseconds"),
        ]
    rendered = render(points, tmp_path / "dash.png", bucket_seconds=BUCKET, references=REFERENCES, title="t")
    page = rendered.html.read_text()
    counters, gauges = page.split("<h2>Gauges", 1)
    assert "<td>RecordsProcessed</td><td>300</td>" in counters
    assert "CurrentLeases" not in counters and "NumWorkers" not in counters
    assert "<td>CurrentLeases</td><td>1 (max 3)</td>" in gauges  # not 6, their sum
    assert "<td>NumWorkers</td><td>4 (max 4)</td>" in gauges  # not 12
    assert "RenewLease.Time" not in page  # timing samples are neither a total nor a level


def test_an_empty_panel_says_what_it_waits_for_inside_the_panel() -> None:
    # The size of one panel of the rendered dashboard (two columns, 14 inches wide).
    figure, axes = plt.subplots(4, 2, figsize=(14, 13.6), squeeze=False)
    try:
        axis = axes[1][1]
        capacity = widget("Leases table: consumed vs provisioned capacity")
        points = [point(5, "RecordsProcessed", 1)]
        draw_widget(
            axis, capacity, points=points, time=time_axis(points, BUCKET), references=REFERENCES, colours={}
        )
        figure.tight_layout()
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        panel = axis.get_window_extent(renderer)
        (text,) = axis.texts
        assert capacity.local_metrics  # the workers report the leases table's capacity
        for metric in capacity.local_metrics:
            assert metric.name in text.get_text()
        box = text.get_window_extent(renderer)
        assert panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0 and box.y1 <= panel.y1
    finally:
        plt.close(figure)


def _drawn_text(widget_: Widget, points: list[MetricPoint]) -> tuple[str, list[str]]:
    """What a panel says in its middle, and its legend's entries."""
    figure, axis = plt.subplots()
    try:
        draw_widget(
            axis,
            widget_,
            points=points,
            time=time_axis(points, BUCKET, START),
            references=REFERENCES,
            colours={w: "C0" for w in fleet_workers(points)},
        )
        legend = axis.get_legend()
        entries = [t.get_text() for t in legend.get_texts()] if legend is not None else []
        return "\n".join(t.get_text() for t in axis.texts), entries
    finally:
        plt.close(figure)


def test_a_widget_the_local_run_cannot_have_says_so_and_where_its_numbers_come_from() -> None:
    # The CloudWatch agent's host metrics never reach the EMF documents, whatever the run held.
    points = [point(5, "CpuUtilization", 40, operation="Process", unit="Percent")]
    text, entries = _drawn_text(widget("CPU per instance"), points)
    text = " ".join(text.split())  # as wrapped to fit the panel
    assert "not available locally" in text and "CloudWatch agent" in text and "cpu_usage_active" in text
    assert entries == []
    # The same run draws the per-worker figure the workers publish themselves.
    text, entries = _drawn_text(widget("CPU per worker"), points)
    assert text == "" and entries == ["worker-1"]


def test_reference_lines_far_above_the_data_are_named_not_drawn() -> None:
    leases = [point(5, "TotalLeases", 6, operation="TakeLeases")]
    _, entries = _drawn_text(widget("Leases total vs 2N"), leases)
    assert entries == ["leases seen by the workers", "2N = 8 (scale out)", "N = 4"]
    lag = [point(5, "MillisBehindLatest", 1_500, operation="ProcessTask", unit="Milliseconds")]
    _, entries = _drawn_text(widget("MillisBehindLatest per worker"), lag)
    assert entries == ["worker-1", "lag alarm at 69,120,000 (off the chart)"]


def test_a_fleet_gauge_is_the_statistic_across_workers_of_its_own_operation() -> None:
    points = [
        point(5, "TotalLeases", 6, operation="TakeLeases", worker="worker-1"),
        point(5, "TotalLeases", 9, operation="TakeLeases", worker="worker-2"),
        point(5, "TotalLeases", 50, operation="SomethingElse", worker="worker-3"),
    ]
    lines = drawn_lines(widget("Leases total vs 2N"), points)
    assert lines["leases seen by the workers"] == ([0.0], [9.0])

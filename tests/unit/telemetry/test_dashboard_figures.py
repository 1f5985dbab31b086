"""What the local dashboard draws: counters as rates per second with zero for empty periods, gauges
broken (not bridged) where a publisher was silent, a time axis on the caller's clock, gauges shown
by their latest value (never added up), and empty panels whose text stays inside the panel."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from consumer.telemetry.dashboard import (
    draw_widget,
    fleet_workers,
    render,
    series_for,
    time_axis,
    y_label,
)
from consumer.telemetry.readback import MetricPoint
from consumer.telemetry.widgets import WIDGETS, Widget

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
            expected_partitions=4,
            colours={w: "C0" for w in workers},
        )
        assert axis.get_ylabel() == y_label(widget_)
        return {
            str(line.get_label()): ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
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
    assert "per second" in y_label(records)
    assert lines["RecordsProcessed (per second)"] == ([0.0, 5.0, 10.0, 15.0], [10.0, 20.0, 0.0, 5.0])
    # The writes line is drawn (the load generator publishes it), zero where it wrote nothing.
    assert lines["TableWrites (per second)"] == ([0.0, 5.0, 10.0, 15.0], [40.0, 0.0, 0.0, 20.0])


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
    rendered = render(points, tmp_path / "dash.png", bucket_seconds=BUCKET, expected_partitions=4, title="t")
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
        capacity = widget("Leases table: consumed capacity and throttles")
        points = [point(5, "RecordsProcessed", 1)]
        draw_widget(
            axis, capacity, points=points, time=time_axis(points, BUCKET), expected_partitions=4, colours={}
        )
        figure.tight_layout()
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        panel = axis.get_window_extent(renderer)
        (text,) = axis.texts
        for name in capacity.metrics:
            assert name in text.get_text()
        box = text.get_window_extent(renderer)
        assert panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0 and box.y1 <= panel.y1
    finally:
        plt.close(figure)

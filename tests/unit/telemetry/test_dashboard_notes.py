"""Every panel of the local picture means something: it draws lines, or says why it has none, and
every line it lacks is named with its reason. A line missing without a reason (a metric every
running worker publishes) is reported as such, so this fails the day a panel goes empty silently.
Also: axes start at zero, the 2N panel says what a short crossing means, and the cost panel's
figures are the rates times the list prices."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from ground.settings import load_settings
from tools.dashboard import prices
from tools.dashboard.readback import MetricPoint
from tools.dashboard.render import draw_widget, render, time_axis
from tools.dashboard.widgets import WORKER, Metric, Widget, reference_lines, widgets_for

CONFIG = Path(__file__).resolve().parents[3] / "config"
START = 1_700_000_000_000
BUCKET = 5.0
# What every running worker publishes each period, records or not (an idle fleet on the emulator).
ALWAYS = [
    ("CurrentLeases", "RenewAllLeases", "Count"),
    ("TotalLeases", "TakeLeases", "Count"),
    ("NumWorkers", "TakeLeases", "Count"),
    ("CpuUtilization", "Process", "Percent"),
    ("MemoryResident", "Process", "Megabytes"),
    ("LeaseTableConsumedReadCapacity", "LeaseTable", "Count"),
    ("LeaseTableConsumedWriteCapacity", "LeaseTable", "Count"),
    ("StreamReadRequests", "Fetcher", "Count"),
]


def point(
    seconds: float, name: str, operation: str, value: float, worker: str, unit: str = "Count"
) -> MetricPoint:
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


def idle_fleet(values: dict[str, dict[str, float]] | None = None) -> list[MetricPoint]:
    """Two workers, six periods, only what they publish with no records flowing; worker-1 is the
    sync leader, which also publishes the open shards it listed."""
    values = values or {}
    return [
        point(seconds, name, operation, values.get(worker, {}).get(name, 2.0), worker, unit)
        for seconds in range(5, 35, 5)
        for worker in ("worker-1", "worker-2")
        for name, operation, unit in ALWAYS
    ] + [point(seconds, "OpenShards", "ShardSyncTask", 2.0, "worker-1") for seconds in range(5, 35, 5)]


def test_an_idle_local_fleet_has_no_panel_that_is_empty_without_saying_why(tmp_path: Path) -> None:
    settings = load_settings("local", CONFIG, environ={})
    rendered = render(
        idle_fleet(),
        tmp_path / "d.png",
        bucket_seconds=BUCKET,
        references=reference_lines(settings),
        widgets=widgets_for(settings),
        title="idle",
        start_millis=START,
    )
    unsaid = [p.title for p in rendered.panels if not p.says_why]
    assert unsaid == []
    notes = {p.title: " ".join(p.notes) for p in rendered.panels}
    assert (
        "only `consumer demo`'s load generator counts writes locally"
        in notes["Records processed vs table writes"]
    )
    assert "retried/s: only when a batch fails" in notes["Retries and dead letters"]
    assert "tumbling windows are off in env local" in notes["Tumbling window state size"]
    assert "not available locally" in notes["CPU per instance"]
    assert "UNEXPLAINED" not in rendered.html.read_text()


def test_a_panel_missing_a_line_without_a_reason_is_reported(tmp_path: Path) -> None:
    """A metric that claims every worker publishes it (no ``absent``), and did not arrive: the panel
    does not pass for explained, and the page says so."""
    silent = Widget("Silent", "Count", "n", (Metric(WORKER, "ShardsBlockedOnParent", "Sum", "blocked/s"),))
    settings = load_settings("local", CONFIG, environ={})
    rendered = render(
        idle_fleet(),
        tmp_path / "d.png",
        bucket_seconds=BUCKET,
        references=reference_lines(settings),
        widgets=(silent,),
        title="t",
    )
    (panel,) = rendered.panels
    assert not panel.says_why and panel.unexplained == ("ShardsBlockedOnParent",)
    assert "UNEXPLAINED: no data for ShardsBlockedOnParent" in rendered.html.read_text()


def _panel(title: str, points: list[MetricPoint]) -> tuple[object, object]:
    settings = load_settings("local", CONFIG, environ={})
    (widget,) = [w for w in widgets_for(settings) if w.title == title]
    figure, axis = plt.subplots()
    state = draw_widget(
        axis,
        widget,
        points=points,
        time=time_axis(points, BUCKET, START),
        references=reference_lines(settings),
        colours={"worker-1": "C0", "worker-2": "C1"},
        time_label="t",
    )
    return (figure, axis), state


def test_every_axis_starts_at_zero_so_a_flat_gauge_reads_flat() -> None:
    """122.5 to 124.5 MB drawn from 122.5 reads as growth; from zero, as the level it is."""
    points = [
        point(s, "MemoryResident", "Process", 122.5 + s / 20, "worker-1", "Megabytes")
        for s in range(5, 60, 5)
    ]
    (figure, axis), _ = _panel("Memory per worker", points)
    try:
        assert axis.get_ylim()[0] == 0  # type: ignore[attr-defined]
    finally:
        plt.close(figure)  # type: ignore[arg-type]


def test_the_2n_panel_says_what_a_short_crossing_means() -> None:
    points = [point(s, "TotalLeases", "TakeLeases", 9 if s == 20 else 5, "worker-1") for s in range(5, 40, 5)]
    (figure, axis), state = _panel("Leases total vs 2N", points)
    try:
        label = " ".join(axis.get_xlabel().split())  # type: ignore[attr-defined]
        assert "Above 2N for less than 5 min adds no instance" in label
        assert "a rollover or a split" in " ".join(state.notes)  # type: ignore[attr-defined]
    finally:
        plt.close(figure)  # type: ignore[arg-type]


def test_the_cost_panel_prices_stream_reads_per_shard() -> None:
    """Two workers poll 25 times per 5 s period each (10 requests/s in all) holding 2 + 3 leases:
    2 requests/s per shard; 10 requests/s held for a month at $0.02 per 100 000."""
    points = idle_fleet(
        {
            "worker-1": {"StreamReadRequests": 25, "CurrentLeases": 2},
            "worker-2": {"StreamReadRequests": 25, "CurrentLeases": 3},
        }
    )
    (figure, _axis), state = _panel("Cost: stream reads per shard and the leases table", points)
    try:
        lines = {
            str(line.get_label()).replace("\\$", "$"): [float(y) for y in line.get_ydata()]
            for ax in figure.axes  # type: ignore[attr-defined]
            for line in ax.get_lines()
        }
        per_shard = lines["stream read requests/s per shard"]
        assert per_shard == pytest.approx([2.0] * len(per_shard))
        monthly = lines["stream reads, $/month at this rate ($0.02 per 100 000 requests)"]
        assert monthly[0] == pytest.approx(10 * prices.SECONDS_PER_MONTH * 0.02 / 100_000)  # $5.26
        # config/local.yaml's leases table is provisioned (10 RCU, 25 WCU): its price, used or not:
        # (10 x $0.00013 + 25 x $0.00065) x 730 h = $12.81.
        provisioned = next(label for label in lines if label.startswith("leases table provisioned"))
        assert provisioned == "leases table provisioned 10 RCU + 25 WCU: $13/month"
        assert not math.isnan(monthly[-1]) and state.lines == 2  # type: ignore[attr-defined]
    finally:
        plt.close(figure)  # type: ignore[arg-type]


def test_the_open_shards_line_says_why_it_breaks_when_the_sync_leader_is_killed(tmp_path: Path) -> None:
    """worker-1 leads the shard sync and is killed after t+15 s; worker-2 lists the stream from t+25 s:
    the open-shards line has a gap, and the panel says why (and says nothing while it has none)."""
    killed = [p for p in idle_fleet() if not (p.worker == "worker-1" and p.timestamp_millis > START + 15_000)]
    killed += [point(seconds, "OpenShards", "ShardSyncTask", 2.0, "worker-2") for seconds in (25, 30)]
    title = "Leases total vs 2N"
    (figure, _axis), state = _panel(title, killed)
    plt.close(figure)  # type: ignore[arg-type]
    assert any(
        n.startswith("open shards N (the sync leader's listing): only the shard-sync leader")
        for n in state.notes
    )  # type: ignore[attr-defined]
    (figure, _axis), steady = _panel(title, idle_fleet())
    plt.close(figure)  # type: ignore[arg-type]
    assert not any("only the shard-sync leader" in n for n in steady.notes)  # type: ignore[attr-defined]


def test_no_open_shards_line_is_explained_when_the_only_leader_that_listed_was_killed_unflushed(
    tmp_path: Path,
) -> None:
    """The demo's run on 04bad9b: worker-1 listed the stream half a second before its SIGKILL and
    never flushed; the next leader's first listing came after the run. No OpenShards point at all:
    the panel says why rather than UNEXPLAINED."""
    unlisted = [p for p in idle_fleet() if p.name != "OpenShards"]
    (figure, _axis), state = _panel("Leases total vs 2N", unlisted)
    plt.close(figure)  # type: ignore[arg-type]
    assert not state.unexplained, state  # type: ignore[attr-defined]
    assert any(
        n.startswith(
            "open shards N (the sync leader's listing): only the shard-sync leader publishes it, after"
        )
        for n in state.notes  # type: ignore[attr-defined]
    )


def test_the_page_says_whose_counts_stop_early_and_why_totals_fall_short(tmp_path: Path) -> None:
    killed = [p for p in idle_fleet() if not (p.worker == "worker-2" and p.timestamp_millis > START + 10_000)]
    settings = load_settings("local", CONFIG, environ={})
    rendered = render(
        killed,
        tmp_path / "d.png",
        bucket_seconds=BUCKET,
        references=reference_lines(settings),
        widgets=widgets_for(settings),
        title="killed",
        start_millis=START,
    )
    page = rendered.html.read_text()
    assert "Stopped publishing early: worker-2 (20 s before the others)" in page
    assert "never flushed its last period" in page
    notes = {p.title: " ".join(p.notes) for p in rendered.panels}
    assert "Records processed need not add up to the writes" in notes["Records processed vs table writes"]
    calm = render(
        idle_fleet(),
        tmp_path / "calm.png",
        bucket_seconds=BUCKET,
        references=reference_lines(settings),
        widgets=widgets_for(settings),
        title="calm",
        start_millis=START,
    )
    assert "Stopped publishing early" not in calm.html.read_text()

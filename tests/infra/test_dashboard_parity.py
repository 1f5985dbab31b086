"""The CloudWatch dashboard and ``consumer dashboard`` draw the same widgets: the one list of
tools/dashboard/widgets.py, in its order, with its titles, in every environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.functional.telemetry.fleet_sim import simulate
from tests.infra.conftest import ENVIRONMENTS, Synthesized, dashboard_body
from tools.dashboard.readback import points_of_all, read_jsonl
from tools.dashboard.render import render
from tools.dashboard.widgets import WIDGETS, reference_lines, widgets_for

pytestmark = pytest.mark.infra


def panel_title(widget: dict[str, Any]) -> str | None:
    """A panel's title: a graph's, or the heading of a text panel (a widget with no line in this
    environment); None for the notes under a graph and the alarm-status widget."""
    if widget["type"] == "metric":
        return str(widget["properties"]["title"])
    markdown = widget["properties"].get("markdown", "") if widget["type"] == "text" else ""
    return markdown.splitlines()[0].removeprefix("### ") if markdown.startswith("### ") else None


def cloudwatch_graph_titles(synth: Synthesized) -> list[str]:
    """The titles of the CDK dashboard's panels (the alarm-status widget is not one of the list)."""
    body = dashboard_body(synth.raw)
    return [title for w in body["widgets"] if (title := panel_title(w)) is not None]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_both_dashboards_draw_every_widget_of_the_one_list(
    env: str, synthesized: dict[str, Synthesized], tmp_path: Path
) -> None:
    synth = synthesized[env]
    assert len({w.title for w in WIDGETS}) == len(WIDGETS), "two widgets of the list share a title"
    # The list less the other source's panels (Widget.only_if): every one of them, in its order.
    expected = [w.title for w in widgets_for(synth.settings)]
    assert cloudwatch_graph_titles(synth) == expected

    source = tmp_path / "emf.jsonl"
    simulate(source, synth.settings, periods=6)
    rendered = render(
        points_of_all(read_jsonl(source)),
        tmp_path / "dash.png",
        bucket_seconds=synth.settings.metrics.flush_interval_seconds,
        references=reference_lines(synth.settings),
        widgets=widgets_for(synth.settings),
        title=env,
    )
    assert list(rendered.titles) == expected


def test_the_dashboards_reference_lines_are_the_alarms_thresholds(
    synthesized: dict[str, Synthesized],
) -> None:
    from infra.scaling import scaling_thresholds

    for synth in synthesized.values():
        lines = {line.value for line in reference_lines(synth.settings).values()}
        assert scaling_thresholds(synth.settings).scale_out_at in lines
        assert (
            synth.settings.scaling.lag_alarm_millis_over(synth.settings.source.stream_retention_hours)
            in lines
        )


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_no_cloudwatch_panel_is_empty_without_saying_why(
    env: str, synthesized: dict[str, Synthesized]
) -> None:
    """Read from the synthesized dashboard body: every graph that may have no line at all in this
    environment (its metrics are off here, or each of them appears only when something happens) has
    a text block right under it, and every line that may be missing is named there with its reason."""
    synth = synthesized[env]
    body = dashboard_body(synth.raw)
    texts = {(w["x"], w["y"]): w["properties"]["markdown"] for w in body["widgets"] if w["type"] == "text"}
    widgets = {w.title: w for w in widgets_for(synth.settings)}
    panels = [w for w in body["widgets"] if panel_title(w) is not None]
    assert len(panels) == len(widgets)
    for graph in panels:
        widget = widgets[str(panel_title(graph))]
        if graph["type"] == "text":  # no line in this environment: the panel says why, in its place
            assert widget.off and all(reason in graph["properties"]["markdown"] for reason in widget.off)
            continue
        below = texts.get((graph["x"], graph["y"] + graph["height"]), "")
        lines = [(m.label, m.absent) for m in widget.cloud_metrics] + [
            (f.label, f.absent) for f in widget.formulas
        ]
        drawn = [m for m in graph["properties"].get("metrics", []) if m[-1].get("visible", True)]
        assert len(drawn) == len(lines), widget.title  # (helpers of a rate are hidden)
        if not lines or all(absent for _, absent in lines):
            assert below, f"{widget.title}: may be empty in env {env} and says nothing about it"
        for label, absent in lines:
            if absent:
                assert f"{label}: {absent}" in below, (widget.title, label)
        for reason in widget.off:
            assert reason in below, (widget.title, reason)


def test_the_cost_panel_prices_stream_reads_per_shard_in_cloudwatch(
    synthesized: dict[str, Synthesized],
) -> None:
    """The CloudWatch cost panel computes what the local one does: the fleet's GetRecords rate over
    the leases it holds (left axis), and that rate at the list price for a month (right axis)."""
    synth = synthesized["prod"]
    body = dashboard_body(synth.raw)
    (graph,) = [w for w in body["widgets"] if w["properties"].get("title", "").startswith("Cost:")]
    expressions = {
        m[0]["label"]: (m[0]["expression"], m[0].get("yAxis", "left")) for m in graph["properties"]["metrics"]
    }
    namespace = synth.settings.metrics_namespace
    reads = (
        f'FILL(SUM(SEARCH(\'{{"{namespace}",Operation,WorkerIdentifier}} MetricName="StreamReadRequests" '
        f"Operation=\"Fetcher\"', 'Sum', 60)), 0) / 60"
    )
    held = (
        f'SUM(SEARCH(\'{{"{namespace}",Operation,WorkerIdentifier}} MetricName="CurrentLeases" '
        f"Operation=\"RenewAllLeases\"', 'Maximum', 60))"
    )
    assert expressions["stream read requests/s per shard"] == (f"({reads}) / {held}", "left")
    monthly, axis = expressions["stream reads, $/month at this rate ($0.02 per 100 000 requests)"]
    assert (monthly, axis) == (f"({reads} * 0.5256)", "right")  # 0.02 / 100 000 x 730 h x 3 600 s
    # prod's leases table is provisioned: its price is a line on the right axis, used or not.
    (line,) = graph["properties"]["annotations"]["horizontal"]
    assert line["label"] == "leases table provisioned 100 RCU + 100 WCU: $57/month"
    assert line["value"] == pytest.approx((100 * 0.00013 + 100 * 0.00065) * 730)
    assert line["yAxis"] == "right"

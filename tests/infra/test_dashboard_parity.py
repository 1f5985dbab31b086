"""The CloudWatch dashboard and ``consumer dashboard`` draw the same widgets: the one list of
consumer/telemetry/widgets.py, in its order, with its titles, in every environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumer.telemetry.dashboard import render
from consumer.telemetry.readback import points_of_all, read_jsonl
from consumer.telemetry.widgets import WIDGETS, reference_lines, widgets_for
from tests.functional.telemetry.fleet_sim import simulate
from tests.infra.conftest import ENVIRONMENTS, Synthesized, dashboard_body

pytestmark = pytest.mark.infra


def cloudwatch_graph_titles(synth: Synthesized) -> list[str]:
    """The titles of the CDK dashboard's graphs (the alarm-status widget is not one of the list)."""
    body = dashboard_body(synth.raw)
    return [w["properties"]["title"] for w in body["widgets"] if w["type"] == "metric"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_both_dashboards_draw_every_widget_of_the_one_list(
    env: str, synthesized: dict[str, Synthesized], tmp_path: Path
) -> None:
    synth = synthesized[env]
    expected = [w.title for w in WIDGETS]
    assert len(set(expected)) == len(expected), "two widgets of the list share a title"
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
        assert synth.settings.scaling.lag_alarm_millis in lines

"""The live dashboard's server side without a browser: what /api/state holds (every panel, JSON
without NaN, gaps as nulls, the leases with each shard's lag), a JSON Lines feed that only hands over
complete lines, and the routes the page needs (tests/e2e/test_live_dashboard.py drives the page)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ground.settings import load_settings
from tests.unit.telemetry.test_dashboard_notes import BUCKET, START, idle_fleet
from tools.dashboard.live import FileFeed, LiveDashboard, LiveServer, dashboard_state, shard_lag, with_lag
from tools.dashboard.readback import MetricPoint
from tools.dashboard.widgets import reference_lines, widgets_for

CONFIG = Path(__file__).resolve().parents[3] / "config"


def _state(points: list[MetricPoint]) -> dict[str, object]:
    settings = load_settings("local", CONFIG, environ={})
    return dashboard_state(
        title="t",
        points=points,
        widgets=widgets_for(settings),
        references=reference_lines(settings),
        bucket_seconds=BUCKET,
        start_millis=START,
        now_millis=START + 40_000,
        leases={"rows": [{"shard": "shardId-1", "owner": "worker-1@h:1"}], "workers": [], "error": None},
        source="file x",
    )


def test_the_state_has_every_panel_as_json_with_gaps_as_nulls() -> None:
    killed = [
        p
        for p in idle_fleet()
        if not (p.worker == "worker-2" and START + 10_000 < p.timestamp_millis < START + 25_000)
    ]
    state = _state(killed)
    text = json.dumps(state, allow_nan=False)  # no NaN reaches the browser
    settings = load_settings("local", CONFIG, environ={})
    assert [p["title"] for p in state["panels"]] == [w.title for w in widgets_for(settings)]  # type: ignore[index]
    panels = {p["title"]: p for p in state["panels"]}  # type: ignore[index]
    memory = panels["Memory per worker"]["lines"]
    worker_2 = next(line for line in memory if line["worker"] == "worker-2")
    assert None in worker_2["y"]  # the paused worker's line breaks
    assert state["workers"] == ["worker-1", "worker-2"] and "NaN" not in text
    assert state["elapsed_seconds"] == 40.0


def test_an_empty_source_says_what_it_waits_for() -> None:
    state = _state([])
    assert all(
        p["lines"] == [] and "waiting for the workers' first metrics" in p["notes"][0]
        for p in state["panels"]
    )  # type: ignore[index]


def test_each_lease_row_gets_its_shards_latest_lag() -> None:
    lagging = [
        MetricPoint(
            START + s * 1000,
            "app",
            "MillisBehindLatest",
            "Milliseconds",
            (v,),
            "ProcessTask",
            "worker-1",
            "shardId-1",
            (),
        )
        for s, v in ((5, 900.0), (10, 120.0))
    ]
    lag = shard_lag(lagging)
    assert lag == {"shardId-1": 120.0}
    rows = with_lag({"rows": [{"shard": "app:orders:1:shardId-1"}, {"shard": "shardId-2"}]}, lag)["rows"]
    assert [r["lag_millis"] for r in rows] == [120.0, None]


def test_a_file_feed_hands_over_complete_lines_once(tmp_path: Path) -> None:
    emf = {
        "_aws": {
            "Timestamp": START,
            "CloudWatchMetrics": [{"Namespace": "a", "Dimensions": [], "Metrics": [{"Name": "X"}]}],
        },
        "X": 1,
    }
    path = tmp_path / "emf.jsonl"
    feed = FileFeed(path)
    assert feed.poll() == []  # not there yet
    path.write_text(json.dumps(emf) + "\n" + json.dumps(emf)[:10])
    assert len(feed.poll()) == 1
    with path.open("a") as out:
        out.write(json.dumps(emf)[10:] + "\n")
    assert len(feed.poll()) == 1 and feed.poll() == []


def test_the_server_serves_the_page_the_library_and_the_state(tmp_path: Path) -> None:
    path = tmp_path / "emf.jsonl"
    path.write_text("")
    settings = load_settings("local", CONFIG, environ={})
    dashboard = LiveDashboard(
        title="t",
        feed=FileFeed(path),
        widgets=widgets_for(settings),
        references=reference_lines(settings),
        bucket_seconds=BUCKET,
        refresh_seconds=0.1,
    )
    with LiveServer(dashboard, port=0) as server:
        for route, kind in (
            ("", "text/html"),
            ("live.js", "javascript"),
            ("vendor/uPlot.iife.min.js", "javascript"),
            ("api/state", "json"),
        ):
            with urllib.request.urlopen(server.url + route, timeout=10) as answer:
                assert answer.status == 200 and kind in answer.headers["Content-Type"], route
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(server.url + "etc/passwd", timeout=10)
        assert missing.value.code == 404

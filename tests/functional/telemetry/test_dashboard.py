"""`consumer dashboard` from a JSONL file and from the metrics log group (moto)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.transports import transport_from_settings
from ground.settings import Settings
from tests.functional.telemetry.fleet_sim import simulate
from tools.cli import main
from tools.dashboard.readback import points_of_all, read_jsonl
from tools.dashboard.render import series_for


def _settings() -> Settings:
    return Settings.model_validate(
        {
            "application_name": "dash-test",
            "table": {"name": "orders", "partition_key": {"name": "pk"}, "partitions": 4},
            "metrics": {"destination": "none", "shard_id_dimension": True, "flush_interval_seconds": 5},
        }
    )


def test_dashboard_from_file_renders_png_and_html_whose_sums_match(tmp_path: Path) -> None:
    source = tmp_path / "emf.jsonl"
    seen = simulate(source, _settings(), periods=12)
    points = points_of_all(read_jsonl(source))
    assert sum(series_for(points, "RecordsProcessed", "Sum", 5).values()) == seen["RecordsProcessed"]
    assert sum(series_for(points, "TableWrites", "Sum", 5).values()) == seen["TableWrites"]

    out = tmp_path / "dash.png"
    assert main(["dashboard", "--env", "local", "--from-file", str(source), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = out.with_suffix(".html").read_text()
    assert "dash.png" in page and "worker-c" in page and "RecordsProcessed" in page


def test_dashboard_reads_the_metrics_log_group(
    tmp_path: Path, logs_client: Any, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = f"dash-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("CONSUMER_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("CONSUMER_APPLICATION_NAME", app)
    settings = _settings().model_copy(update={"application_name": app, "endpoint_url": moto_endpoint})
    settings = Settings.model_validate(
        {**settings.model_dump(), "metrics": {**settings.metrics.model_dump(), "destination": "logs"}}
    )
    recorder = MetricsRecorder(
        settings, "worker-x", transport_from_settings(settings, "worker-x", logs_client)
    )
    recorder.count("ProcessTask", "RecordsProcessed", 42, shard_id="s-1")
    recorder.stop(timeout_seconds=10)

    out = tmp_path / "live.png"
    assert main(["dashboard", "--env", "local", "--out", str(out)]) == 0
    assert out.exists() and "worker-x" in out.with_suffix(".html").read_text()


def test_empty_or_bad_sources_fail_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["dashboard", "--from-file", str(empty), "--out", str(tmp_path / "x.png")]) == 1
    assert "no EMF documents" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"ok": 1}\nnot json\n')
    assert main(["dashboard", "--from-file", str(broken), "--out", str(tmp_path / "x.png")]) == 1
    assert "broken.jsonl:2" in capsys.readouterr().err

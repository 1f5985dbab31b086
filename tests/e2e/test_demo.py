"""The main job, shortened: `consumer demo` end to end (load, workers, a join, a SIGKILL, drain,
Spark snapshot and verify, dashboard) must end with its verdict: nothing lost, nothing reordered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def test_demo_verdict(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CONSUMER_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "CONSUMER_LOAD__DURATION_SECONDS": "12",
        "CONSUMER_PROCESSING__OPTIONS__DESTINATION": str(tmp_path / "changelog"),
        "CONSUMER_PIPELINE__CHANGELOG_URI": str(tmp_path / "changelog"),
        "CONSUMER_PIPELINE__SNAPSHOT_URI": str(tmp_path / "snapshot"),
        "CONSUMER_PIPELINE__STATS_URI": str(tmp_path / "stats"),
        "COLUMNS": "120",
    }
    result = subprocess.run(
        [sys.executable, "-m", "consumer.cli", "demo", "--env", "local", "--config-dir", str(REPO / "config"),
         "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "VERDICT: nothing lost, nothing reordered" in output
    assert "0 missing, 0 extra, 0 stale" in output
    assert "SIGKILL worker-" in output and "joined" in output
    assert (tmp_path / "demo" / "dashboard.png").stat().st_size > 10_000

"""`consumer local up|status|down` starts a reachable emulator and leaves no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3

CONFIG = Path(__file__).resolve().parents[2] / "config"


def _consumer(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer.cli", "local", *args],
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_up_status_down(tmp_path: Path) -> None:
    up = _consumer(tmp_path, "up", "--config-dir", str(CONFIG), "--port", "0")
    state_file = tmp_path / "var" / "emulator.json"
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(state_file.read_text())
        assert state["endpoint"] in up.stdout and "--endpoint-url" in up.stdout and "boto3" in up.stdout
        assert _consumer(tmp_path, "status").returncode == 0
        client = boto3.client(
            "dynamodbstreams",
            endpoint_url=state["endpoint"],
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        assert client.list_streams()["Streams"] == []
    finally:
        down = _consumer(tmp_path, "down")
    assert down.returncode == 0
    assert not state_file.exists()
    try:
        os.kill(int(state["pid"]), 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive
    assert _consumer(tmp_path, "status").returncode == 3

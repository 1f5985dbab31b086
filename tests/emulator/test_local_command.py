"""`consumer local up|status|down` starts a reachable emulator, creates the tables the configuration
names, and leaves no process behind — also when Python runs unbuffered (PYTHONUNBUFFERED=1, common
in containers), where the ready line and its newline used to arrive in two writes and the emulator
died on the second one once `up` had closed the pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tools.commands import ExitCode

CONFIG = Path(__file__).resolve().parents[2] / "config"
ROOT = CONFIG.parent


def _consumer(cwd: Path, *args: str, unbuffered: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "tools.cli", "local", *args],
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED=1"])
def test_up_status_down(tmp_path: Path, unbuffered: bool) -> None:
    up = _consumer(
        tmp_path, "up", "--env", "local", "--config-dir", str(CONFIG), "--port", "0", unbuffered=unbuffered
    )
    state_file = tmp_path / "var" / "emulator-local.json"  # one file per environment
    state: dict[str, object] = {}
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(state_file.read_text())
        assert state["endpoint"] in up.stdout and "--endpoint-url" in up.stdout and "boto3" in up.stdout
        assert up.stderr.startswith("env local from "), up.stderr
        # The emulator is still there after `up` let go of its stdout.
        status = _consumer(tmp_path, "status", unbuffered=unbuffered)
        assert status.returncode == 0 and "answering" in status.stdout, status.stdout + status.stderr
        dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=str(state["endpoint"]),
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        # The source table of config/local.yaml (key schema from base.yaml), with its stream.
        table = dynamodb.describe_table(TableName="orders")["Table"]
        assert [(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]] == [
            ("pk", "HASH"),
            ("sk", "RANGE"),
        ]
        assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        assert "source table orders: created" in up.stdout
        # A second `up` finds the emulator and the table and changes nothing.
        again = _consumer(tmp_path, "up", "--env", "local", "--config-dir", str(CONFIG))
        assert again.returncode == 0 and "already running" in again.stdout and "already there" in again.stdout
    finally:
        down = _consumer(tmp_path, "down")
    assert down.returncode == 0
    assert not state_file.exists()
    assert not _alive(int(str(state["pid"])))
    assert _consumer(tmp_path, "status").returncode == ExitCode.UNAVAILABLE


def test_ready_line_survives_a_reader_that_already_left() -> None:
    """The emulator's announcement, made when whoever waited for it has closed the pipe, and any
    output after it: neither may raise (the closed pipe used to stop the emulator)."""
    code = (
        "import sys\n"
        "from emulator.server import announce_ready\n"
        "announce_ready('EMULATOR READY http://127.0.0.1:1')\n"
        "print('anything printed later')\n"
        "print('still running', file=sys.stderr)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader is gone before the child has imported anything
    try:
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err.decode()
    assert b"still running" in err

"""`consumer local up|status|down` starts a reachable emulator, creates the tables the configuration
names, and leaves no process behind — also when Python runs unbuffered (PYTHONUNBUFFERED=1, common
in containers), where the ready line and its newline used to arrive in two writes and the emulator
died on the second one once `up` had closed the pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tools.commands import ExitCode

CONFIG = Path(__file__).resolve().parents[2] / "config"
ROOT = CONFIG.parent


def _consumer(
    cwd: Path, *args: str, unbuffered: bool = False, endpoint: str = ""
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if endpoint:  # the emulator `up --port 0` started, not config/local.yaml's port
        env["CONSUMER_ENDPOINT_URL"] = endpoint
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


def test_local_write_twice_delivers_new_records_or_fails(tmp_path: Path) -> None:
    """The same `local write` twice: the second writes new values (its records reach the stream and
    a worker gets them); on a table without a stream, it exits non-zero saying none arrived, never
    "processed"."""
    from emulator.control import EmulatorControl
    from tools.local_aws import stream_positions

    up = _consumer(tmp_path, "up", "--env", "local", "--config-dir", str(CONFIG), "--port", "0")
    try:
        assert up.returncode == 0, up.stderr
        endpoint = json.loads((tmp_path / "var" / "emulator-local.json").read_text())["endpoint"]
        control = EmulatorControl(endpoint)

        def records() -> int:
            shards = control.shards("orders")
            return len([s for s in stream_positions(shards).values() if s is not None])

        def last_positions() -> dict[str, str | None]:
            return stream_positions(control.shards("orders"))

        write = ("write", "--env", "local", "--config-dir", str(CONFIG), "--count", "3", "--wait", "0")
        first = _consumer(tmp_path, *write, endpoint=endpoint)
        assert first.returncode == 0, first.stderr
        after_first = last_positions()
        second = _consumer(tmp_path, *write, endpoint=endpoint)
        assert second.returncode == 0, second.stderr
        after_second = last_positions()
        moved = [s for s, last in after_second.items() if last is not None and after_first.get(s) != last]
        assert moved and records() >= 1, (after_first, after_second)
        assert "written_at" in second.stdout
        # No worker runs: waiting for one fails, naming the shards behind, instead of "processed".
        waited = _consumer(tmp_path, *write[:-1], "2", endpoint=endpoint)
        assert waited.returncode == ExitCode.FAILED, waited.stdout
        assert "processed:" not in waited.stdout and "not processed within 2 s" in waited.stderr
        # A table without a stream: the writes change the table, but no record arrives.
        dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        dynamodb.delete_table(TableName="orders")
        dynamodb.create_table(
            TableName="orders",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        silent = _consumer(tmp_path, *write, endpoint=endpoint)
        assert silent.returncode == ExitCode.FAILED, silent.stdout + silent.stderr
        assert "none of the 3 writes reached the stream of orders" in silent.stderr
    finally:
        assert _consumer(tmp_path, "down").returncode == 0


def test_docs_name_the_state_file_and_the_exit_codes_status_uses() -> None:
    """docs/emulator.md says where `up` records the emulator and which codes `status` exits with."""
    from tools.local_aws import state_path

    docs = (ROOT / "docs" / "emulator.md").read_text()
    assert f"`{state_path('<env>')}`" in docs
    status_line = next(line for line in docs.splitlines() if line.startswith("consumer local status"))
    codes = {int(code) for code in re.findall(r"\b(\d)\b", status_line.split("#", 1)[1])}
    assert codes == {ExitCode.OK, ExitCode.UNAVAILABLE}, status_line

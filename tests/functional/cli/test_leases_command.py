"""`consumer leases` shows owners, checkpoints, states and per-worker heartbeats."""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease
from ground.settings import WorkerSettings
from tools.cli import main
from tools.commands import ExitCode


def test_table_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.yaml").write_text(
        "application_name: view-app\nregion: us-east-1\ntable: {name: orders, partition_key: {name: pk}}\n"
    )
    now = time.time_ns() // 1_000_000
    with mock_aws():
        store = DynamoDBLeaseStore(boto3.client("dynamodb", region_name="us-east-1"), "view-app")
        store.ensure_table(WorkerSettings())
        store.heartbeat(Heartbeat("alive-worker", 1, now), None)
        store.heartbeat(Heartbeat("dead-worker", 1, now - 600_000), None)
        for shard, owner, checkpoint in [
            ("shard-a", "alive-worker", "123"),
            ("shard-b", "dead-worker", "TRIM_HORIZON"),
            ("shard-c", None, "TRIM_HORIZON"),
            ("shard-d", "alive-worker", "SHARD_END"),
        ]:
            store.create_if_absent(Lease(shard, owner, 1, ExtendedSequenceNumber(checkpoint)))
        assert main(["leases", "--env", "t", "--config-dir", str(tmp_path), "--all"]) == 0
        out = capsys.readouterr().out
        # The title counts the rows under it, and says what it leaves out and how to see it.
        assert main(["leases", "--env", "t", "--config-dir", str(tmp_path)]) == 0
        hiding = capsys.readouterr().out
    assert "leases (4 shown; 1 finished)" in out
    assert "leases (3 shown; 1 finished, hidden: --all shows them)" in hiding
    assert "shard-d" not in hiding
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    assert "held" in lines["shard-a"] and "123" in lines["shard-a"]
    assert "expired" in lines["shard-b"]
    assert "free" in lines["shard-c"]
    assert "finished" in lines["shard-d"]
    assert "alive-worker" in out and "dead-worker" in out


def test_missing_table_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.yaml").write_text(
        "application_name: nothing-here\ntable: {name: orders, partition_key: {name: pk}}\n"
    )
    with mock_aws():
        assert main(["leases", "--env", "t", "--config-dir", str(tmp_path)]) == ExitCode.UNAVAILABLE
    (_env_line, error) = capsys.readouterr().err.splitlines()
    assert error.startswith("error: leases table nothing-here does not exist")
    assert "`consumer run --env t` creates it" in error

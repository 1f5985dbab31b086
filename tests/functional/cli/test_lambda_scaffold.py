"""`consumer new processor --lambda NAME`: a Lambda handler, its test and an environment that
validates; the handler's own test passes, and the fleet's Lambda form runs the handler as written."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from consumer.processing import InMemoryCheckpointer, ProcessRecordsInput
from consumer.records import ShardInfo
from consumer.runtime.processors import build_processor_factory
from ground.settings import load_settings
from tests.unit.processing.helpers import records
from tools.cli import main

REPO_CONFIG = Path(__file__).resolve().parents[3] / "config"
STREAM = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"


def forget_processors() -> None:
    for name in [m for m in sys.modules if m == "processors" or m.startswith("processors.")]:
        del sys.modules[name]


def test_the_lambda_scaffold_validates_passes_its_test_and_runs_on_the_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(REPO_CONFIG, tmp_path / "config")
    monkeypatch.chdir(tmp_path)
    assert main(["new", "processor", "--lambda", "orders_audit"]) == 0
    assert "processors/orders_audit.py" in capsys.readouterr().out
    assert "def lambda_handler(event, context):" in (tmp_path / "processors" / "orders_audit.py").read_text()
    try:
        assert main(["config", "validate", "--env", "orders_audit", "--config-dir", "config"]) == 0
        assert "processor lambda:processors.orders_audit.lambda_handler" in capsys.readouterr().out
        settings = load_settings("orders_audit", tmp_path / "config")
        processor = build_processor_factory(settings, stream_arn=lambda: STREAM)(ShardInfo("shardId-1"))
        checkpointer = InMemoryCheckpointer("shardId-1")
        delivered = records(1, 3, shard="shardId-1")
        checkpointer.delivered(delivered[-1].sequence_number)
        processor.process_records(ProcessRecordsInput(delivered, checkpointer, 0, ShardInfo("shardId-1")))
    finally:
        forget_processors()
    landed = [json.loads(line) for line in (tmp_path / "var" / "orders_audit.jsonl").read_text().splitlines()]
    assert [line["sequence_number"] for line in landed] == [r.sequence_number for r in delivered]
    assert {line["source"] for line in landed} == {STREAM}
    assert checkpointer.last_checkpoint == delivered[-1].sequence_number
    # The scaffold's own test, run here as pytest would run it (its module imported from the project).
    spec = importlib.util.spec_from_file_location(
        "test_orders_audit", tmp_path / "tests" / "test_orders_audit.py"
    )
    assert spec is not None and spec.loader is not None
    scaffold_test = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(scaffold_test)
        (tmp_path / "own-test").mkdir()
        scaffold_test.test_each_record_becomes_one_line(tmp_path / "own-test", monkeypatch)
    finally:
        forget_processors()

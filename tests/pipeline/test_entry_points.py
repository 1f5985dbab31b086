"""The entry points: `consumer pipeline …` and the spark-submit module share arguments and jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from ground.settings import load_settings
from pipeline.jobs import build_parser as submit_parser
from pipeline.snapshot_run import run_snapshot, snapshot_tables
from tests.pipeline.fixtures import change, write_object
from tools.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_cli_and_spark_submit_take_the_same_arguments() -> None:
    cli = build_parser().parse_args(
        ["pipeline", "snapshot", "--env", "dev", "--full", "--tolerate-bad-lines", "3"]
    )
    submit = submit_parser().parse_args(["snapshot", "--env", "dev", "--full", "--tolerate-bad-lines", "3"])
    cli_verbose = build_parser().parse_args(["pipeline", "stats", "-v"])
    assert cli_verbose.verbose and submit_parser().parse_args(["stats", "--verbose"]).verbose
    for name in ("job", "env", "full", "tolerate_bad_lines", "verbose"):
        assert getattr(cli, name) == getattr(submit, name)
    assert build_parser().parse_args(["pipeline", "verify"]).job == "verify"


def _config(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config"
    config.mkdir()
    base = yaml.safe_load((ROOT / "config" / "base.yaml").read_text())
    base["pipeline"] = {
        "changelog_uri": str(tmp_path / "changelog"),
        "snapshot_uri": str(tmp_path / "snapshot"),
        "stats_uri": str(tmp_path / "stats"),
        "spark_master": "local[1]",
        "freshness_seconds": 10,  # polls every second when up to date
    }
    (config / "base.yaml").write_text(yaml.safe_dump(base))
    (config / "local.yaml").write_text("{}\n")
    return {**os.environ, "CONSUMER_CONFIG_DIR": str(config)}


def _follow(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tools.cli", "pipeline", "follow", "--env", "local"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _read_until(process: subprocess.Popen[str], wanted: str, seen: list[str], deadline: float) -> None:
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"follow ended before printing {wanted!r}:\n{''.join(seen)}")
        seen.append(line)
        if wanted in line:
            return
    raise AssertionError(f"no {wanted!r} in time:\n{''.join(seen)}")


@pytest.mark.slow
@pytest.mark.spark
def test_consumer_pipeline_follow_killed_mid_run_and_started_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A real ``consumer pipeline follow`` process: SIGKILLed while a run writes, started again, it
    merges what the killed run had not committed, each change once; SIGTERM then stops it cleanly.
    Quiet by default (no Spark, log4j, JVM or pandas warnings). The table is laid out beforehand in
    this process (same config), so that the first process's first run is already the incremental
    one it is killed in: it need not spend a cold JVM on the first commit."""
    env = _config(tmp_path)
    settings = load_settings("local", environ=env)
    log = tmp_path / "changelog"
    batches = [
        [change("s1", 1, "INSERT", "a"), change("s1", 2, "INSERT", "b")],
        [change("s1", 3, "MODIFY", "a", image={"n": {"N": "3"}}), change("s1", 4, "REMOVE", "b")],
        [change("s1", 5, "INSERT", "c"), change("s1", 6, "INSERT", "d")],
    ]
    write_object(log, batches[0])
    assert run_snapshot(spark, settings).version == "000001"
    write_object(log, batches[1])
    deadline = time.monotonic() + 240
    first, seen = _follow(env), []  # type: ignore[var-annotated]
    try:
        _read_until(first, "1 object(s) to read, 1 already merged", seen, deadline)  # from the commit
        _read_until(first, "[2/4] merging", seen, deadline)  # Spark writes now
        first.kill()
    finally:
        first.kill()
        first.wait(timeout=30)
    assert not any("[4/4] committed" in line for line in seen), "".join(seen)
    write_object(log, batches[2])
    second, again = _follow(env), []  # type: ignore[var-annotated]
    try:
        _read_until(second, "2 object(s) to read, 1 already merged", again, deadline)
        _read_until(second, "(3 items, 1 tombstones)", again, deadline)
        second.send_signal(signal.SIGTERM)
        output, _ = second.communicate(timeout=120)
    finally:
        second.kill()
    assert second.returncode == 0, "".join(again) + output
    assert "[follow] stopped:" in output
    text = "".join(seen + again) + output
    for noise in ("WARN", "log4j", "Warning", "Setting default log level", "incubator"):
        assert noise not in text, text

    table = snapshot_tables(settings).items_table()
    assert table is not None
    assert sorted(r["pk"] for r in table.scan(selected_fields=("pk",)).to_arrow().to_pylist()) == [
        "a",
        "c",
        "d",
    ]
    merged = sum(
        int(s.summary.additional_properties.get("consumer.new-changes", 0))
        for s in table.metadata.snapshots
        if s.summary is not None
    )
    assert merged == 6  # every change in exactly one commit of the items table

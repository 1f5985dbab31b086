"""The entry points: `consumer pipeline …` and the spark-submit module share arguments and jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.jobs import build_parser as submit_parser
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


@pytest.mark.slow
@pytest.mark.spark
def test_consumer_pipeline_snapshot_in_a_fresh_process(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    base = yaml.safe_load((ROOT / "config" / "base.yaml").read_text())
    base["pipeline"] = {
        "changelog_uri": str(tmp_path / "changelog"),
        "snapshot_uri": str(tmp_path / "snapshot"),
        "stats_uri": str(tmp_path / "stats"),
        "spark_master": "local[1]",
    }
    (config / "base.yaml").write_text(yaml.safe_dump(base))
    (config / "local.yaml").write_text("{}\n")
    write_object(tmp_path / "changelog", [change("s1", 1, "INSERT", "a"), change("s1", 2, "INSERT", "b")])
    env = {**os.environ, "CONSUMER_CONFIG_DIR": str(config)}
    run = subprocess.run(
        [sys.executable, "-m", "tools.cli", "pipeline", "snapshot", "--env", "local"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "[4/4] committed" in run.stdout and "(2 items," in run.stdout
    # Quiet by default: no Spark, log4j, JVM or pandas warnings (`-v` shows them).
    output = run.stdout + run.stderr
    for noise in ("WARN", "log4j", "Warning", "Setting default log level", "incubator"):
        assert noise not in output, output

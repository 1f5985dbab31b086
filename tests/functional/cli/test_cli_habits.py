"""What a person expects of a command-line tool: ``--version``, a description on every command's
``--help``, help that lists what exists, readable logs with a format and a level to choose, and
``config validate --show`` printing the values the product derives instead of null."""

from __future__ import annotations

import io
import json
import logging
import re
from importlib.metadata import version
from pathlib import Path

import pytest

import consumer
from consumer.telemetry.logs import configure_logging
from ground.settings import load_settings
from tools.cli import build_parser, main, subcommands
from tools.commands.pipeline import JOBS
from tools.commands.run import with_log_options

CONFIG = Path(__file__).resolve().parents[3] / "config"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"consumer {version('dynamodb-stream-fleet')} ")
    assert version("dynamodb-stream-fleet") == consumer.__version__  # pyproject and the package agree


def test_every_command_has_a_description() -> None:
    found = dict(subcommands(build_parser()))
    assert {
        "consumer run",
        "consumer local up",
        "consumer pipeline submit",
        "consumer config validate",
    } <= set(found)
    for name, parser in found.items():
        assert parser.description and len(parser.description) > 20, f"{name} --help has no description"
        assert parser.format_help().count("\n\n") >= 2, name  # usage, description, arguments


def test_pipeline_help_lists_what_exists_and_where_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["pipeline", "--help"])
    out = capsys.readouterr().out
    assert "(local mode)" not in out
    for job in [*JOBS, "submit"]:
        assert re.search(rf"^\s+{job}\b", out, re.MULTILINE), job
    assert "EMR Serverless" in out and "local Spark session" in out


def test_validate_show_fills_in_what_is_derived(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "--env", "prod", "--config-dir", str(CONFIG), "--show"]) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    assert shown["worker"]["lease_table_name"] == "orders-stream-consumer-prod"
    assert shown["worker"]["lease_renewal_interval_millis"] == 10000 // 3 - 25
    assert shown["metrics"]["namespace"] == "orders-stream-consumer-prod"
    assert shown["logs"]["worker_log_group"] == "/orders-stream-consumer-prod/lease-worker"
    assert shown["table"]["partitions"] == 44
    assert "derived (not set in the files" in captured.err and "worker.lease_table_name" in captured.err


def _log_line(settings_env: str, log_format: str | None, level: str | None, tty: bool) -> str:
    settings = with_log_options(load_settings(settings_env, CONFIG, environ={}), log_format, level)
    settings = settings.model_copy(
        update={"logs": settings.logs.model_copy(update={"ship_to_cloudwatch": False})}
    )

    class Console(io.StringIO):
        def isatty(self) -> bool:
            return tty

    console = Console()
    handle = configure_logging(settings, "worker-7", console=console)
    try:
        logging.getLogger("consumer.leases").debug("debug line")
        logging.getLogger("consumer.leases").info("took %s", "shard-a", extra={"counter": 3})
    finally:
        handle.close()
    return console.getvalue()


def test_logs_are_readable_lines_on_a_terminal_and_json_otherwise() -> None:
    text = _log_line("local", None, None, tty=True)
    assert " INFO    consumer.leases [worker-7] took shard-a (counter=3)" in text
    assert json.loads(_log_line("local", None, None, tty=False))["message"] == "took shard-a"
    # --log-format wins over the terminal test, --log-level over logs.level.
    assert json.loads(_log_line("local", "json", None, tty=True))["counter"] == 3
    assert "took shard-a" in _log_line("local", "text", None, tty=False).split("\n")[0]
    debug = _log_line("local", "text", "DEBUG", tty=False)
    assert "DEBUG   consumer.leases [worker-7] debug line" in debug


def test_run_takes_the_log_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--log-format {text,json}" in out and "--log-level" in out

"""source: which stream an environment reads -- table:'s DynamoDB stream by default, or a Kinesis data
stream named by its name or ARN; every mistake named with what to fix."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ground.settings import ConfigError, Settings, load_settings
from tools.cli import main
from tools.commands import ExitCode

REPO_CONFIG = Path(__file__).resolve().parents[3] / "config"
ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders-events"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(REPO_CONFIG, target)
    return target


def with_source(config: Path, text: str, env: str = "local") -> Path:
    path = config / f"{env}.yaml"
    path.write_text(path.read_text() + "\nsource:\n" + text)
    return config


@pytest.mark.parametrize("env", ["local", "dev", "prod"])
def test_shipped_environments_read_the_tables_stream(env: str) -> None:
    settings = load_settings(env, REPO_CONFIG, environ={})
    assert settings.source.kind == "dynamodb" and not settings.source.is_kinesis
    assert not settings.partitions()[1].startswith("source.")


def test_a_kinesis_stream_by_name_or_arn(config: Path) -> None:
    by_name = load_settings("local", with_source(config, "  kind: kinesis\n  stream_name: orders-events\n"))
    assert by_name.source.is_kinesis and by_name.source.kinesis_stream == "orders-events"
    assert by_name.partitions() == (4, "source.shard_count (the Kinesis stream's open shards)")
    by_arn = load_settings("local", config, environ={"CONSUMER_SOURCE__STREAM_ARN": ARN})
    assert by_arn.source.kinesis_stream == ARN  # the ARN (agreeing with the name) names the account too


def test_environment_variables_choose_the_source() -> None:
    environ = {"CONSUMER_SOURCE__KIND": "kinesis", "CONSUMER_SOURCE__STREAM_NAME": "clicks"}
    settings = load_settings("prod", REPO_CONFIG, environ=environ)
    assert settings.source.kinesis_stream == "clicks"


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("  kind: kinesis\n", "source", "set stream_name"),
        ("  kind: kenesis\n", "source.kind", "kinesis"),
        ("  stream_name: orders-events\n", "source", "set kind: kinesis"),
        ("  kind: kinesis\n  stream_arn: arn:aws:dynamodb:x\n", "source", "not a Kinesis data stream's ARN"),
        ("  kind: kinesis\n  stream_name: other\n  stream_arn: " + ARN + "\n", "source", "make them agree"),
        ("  kind: kinesis\n  stream_name: no spaces\n", "source.stream_name", "pattern"),
        (
            "  kind: kinesis\n  stream_name: s\n  shard_count: 0\n",
            "source.shard_count",
            "greater than or equal",
        ),
        ("  kind: kinesis\n  streem_name: s\n", "source.streem_name", "stream_name"),
        ("  kind: kinesis\n  stream_name: s\n  retention_hours: 12\n", "source.retention_hours", "24"),
        ("  kind: kinesis\n  stream_name: s\n  retention_hours: 9000\n", "source.retention_hours", "8760"),
        ("  kind: kinesis\n  stream_name: s\n  kms_key_arn: alias/mine\n", "source.kms_key_arn", "pattern"),
        ("  kind: kinesis\n  stream_name: s\n  stream_mode: ON_DEMAND\n", "source", "set create: true"),
        ("  create: true\n", "source", "set kind: kinesis"),
        ("  retention_hours: 48\n", "source", "describe a Kinesis stream but kind is dynamodb"),
    ],
)
def test_mistakes_name_the_key_and_the_fix(config: Path, text: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings("local", with_source(config, text))
    assert any(p.path == key and words in p.message for p in info.value.problems), info.value


def test_kinesis_and_several_tables_are_refused_together(config: Path) -> None:
    (config / "local.yaml").write_text(
        (config / "local.yaml").read_text()
        + "\nsource: {kind: kinesis, stream_name: s}\nstreams:\n  - table: {name: orders}\n"
    )
    with pytest.raises(ConfigError, match="give that entry of streams: its own source:"):
        load_settings("local", config)


def test_an_entry_of_streams_reads_a_kinesis_stream_beside_a_tables(config: Path) -> None:
    kinesis = (
        "  - source: {kind: kinesis, stream_name: clicks, shard_count: 2}\n"
        "    processing: {processor: 'handlers:clicks', dead_letter: {type: none, uri: var/dl-clicks}}\n"
    )
    (config / "local.yaml").write_text(
        (config / "local.yaml").read_text() + "\nstreams:\n  - table: {name: orders}\n" + kinesis
    )
    settings = load_settings("local", config, environ={})
    table, stream = settings.per_stream()
    assert not table.source.is_kinesis and table.table.name == "orders"
    assert stream.source.kinesis_stream == "clicks" and stream.processing.processor == "handlers:clicks"
    assert settings.partitions()[0] == table.partitions()[0] + 2
    # The Kinesis entry's table is the top level's: not "a table listed twice". The stream twice is.
    (config / "local.yaml").write_text((config / "local.yaml").read_text() + kinesis.replace("dl-", "dl2-"))
    with pytest.raises(ConfigError, match="Kinesis stream 'clicks' is already streams.1's"):
        load_settings("local", config, environ={})


def test_config_validate_shows_the_source_error_on_one_line(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_source(config, "  kind: kinesis\n", env="prod")
    assert main(["config", "validate", "--env", "prod", "--config-dir", str(config)]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert "source" in err and "stream_name" in err and "Traceback" not in err


def _function(settings: Settings, **processing: Any) -> Settings:
    update = {"processor": "handlers:h", **processing}
    return settings.model_copy(update={"processing": settings.processing.model_copy(update=update)})


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda s: s, "processing.processor changelog writes a table's changes"),
        (
            lambda s: _function(s, filter=s.processing.filter.model_copy(update={"event_names": ["INSERT"]})),
            "event_names",
        ),
        (
            lambda s: _function(s).model_copy(
                update={"worker": s.worker.model_copy(update={"on_trimmed": "reload"})}
            ),
            "on_trimmed: reload",
        ),
    ],
)
def test_consumer_run_refuses_what_a_kinesis_stream_cannot_go_through(
    config: Path, change: Callable[[Settings], Settings], words: str
) -> None:
    """The sinks that write a table's changes, a reload, a filter on DynamoDB's event names: refused
    before any client call, each naming the key."""
    from consumer.runtime.process import WorkerProcess
    from consumer.streams.target import StreamConfigError

    settings = load_settings("local", with_source(config, "  kind: kinesis\n  stream_name: orders-events\n"))
    with pytest.raises(StreamConfigError, match=r"source.kind: kinesis \(orders-events\)") as info:
        WorkerProcess.prepare(change(settings), "w1")
    assert words in str(info.value)


def test_a_created_streams_keys_and_its_retention(config: Path) -> None:
    text = "  kind: kinesis\n  stream_arn: " + ARN + "\n  create: true\n  stream_mode: ON_DEMAND\n"
    source = load_settings("local", with_source(config, text + "  retention_hours: 8760\n")).source
    assert (source.kinesis_stream_name, source.stream_mode, source.stream_retention_hours) == (
        "orders-events",
        "ON_DEMAND",
        8760,
    )
    # A DynamoDB stream keeps 24 h whatever retention_hours' default says.
    assert load_settings("local", REPO_CONFIG, environ={}).source.stream_retention_hours == 24

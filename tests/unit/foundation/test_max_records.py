"""worker.max_records, the Limit of each GetRecords: unset, each stream is read the most its service
serves a call (1000 from a table's stream, 10 000 from a Kinesis stream, the Java KCL's maxRecords
default); set, it must fit every stream read, each entry of streams: with its own source."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ground.settings import ConfigError, Settings, load_settings

REPO_CONFIG = Path(__file__).resolve().parents[3] / "config"
KINESIS_ENTRY = (
    "  - source: {kind: kinesis, stream_name: clicks, shard_count: 2}\n"
    "    processing: {processor: 'handlers:clicks', dead_letter: {type: none, uri: var/dl-clicks}}\n"
)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(REPO_CONFIG, target)
    return target


def with_text(config: Path, text: str) -> Path:
    """config/ with an environment ``trial`` of ``text`` over base.yaml."""
    (config / "trial.yaml").write_text(text)
    return config


def reads(settings: Settings) -> list[int]:
    """Each stream's GetRecords Limit, in the order of per_stream()."""
    return [view.worker.records_per_read(view.source.max_records_per_read) for view in settings.per_stream()]


def test_unset_each_source_is_read_its_services_most(config: Path) -> None:
    assert reads(load_settings("local", config, environ={})) == [1000]
    kinesis = load_settings(
        "trial", with_text(config, "source: {kind: kinesis, stream_name: s}\n"), environ={}
    )
    assert kinesis.worker.max_records is None and reads(kinesis) == [10_000]


def test_unset_each_entry_of_streams_is_read_its_own_sources_most(config: Path) -> None:
    settings = load_settings(
        "trial", with_text(config, "streams:\n  - table: {name: orders}\n" + KINESIS_ENTRY), environ={}
    )
    assert reads(settings) == [1000, 10_000]


def test_a_kinesis_source_takes_up_to_10000(config: Path) -> None:
    text = "source: {kind: kinesis, stream_name: s}\nworker: {max_records: 10000}\n"
    assert reads(load_settings("trial", with_text(config, text), environ={})) == [10_000]
    with pytest.raises(ConfigError, match="less than or equal to 10000"):
        load_settings("trial", config, environ={"CONSUMER_WORKER__MAX_RECORDS": "10001"})


def test_above_1000_with_a_tables_stream_is_refused_naming_the_key_and_the_limit(config: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings("trial", with_text(config, "worker: {max_records: 1001}\n"), environ={})
    (problem,) = info.value.problems
    assert problem.path == "worker.max_records" and problem.source.endswith("trial.yaml")
    assert "DynamoDB Streams serves at most 1000 records a GetRecords call" in problem.message
    assert "the stream of table: is read" in problem.message and "use 1..1000" in problem.message


def test_above_1000_is_refused_when_any_entry_of_streams_reads_a_table(config: Path) -> None:
    entries = "streams:\n  - table: {name: orders}\n" + KINESIS_ENTRY
    with_text(config, entries)
    with pytest.raises(ConfigError, match=r"streams\.0 reads a table's stream") as info:
        load_settings("trial", config, environ={"CONSUMER_WORKER__MAX_RECORDS": "5000"})
    assert info.value.problems[0].source == "environment variable CONSUMER_WORKER__MAX_RECORDS"
    # 1000 fits both: each is read 1000 a call.
    assert reads(load_settings("trial", config, environ={"CONSUMER_WORKER__MAX_RECORDS": "1000"})) == [
        1000,
        1000,
    ]


def test_above_1000_is_taken_when_every_entry_of_streams_reads_kinesis(config: Path) -> None:
    only_kinesis = "streams:\n" + KINESIS_ENTRY + KINESIS_ENTRY.replace("clicks", "views")
    settings = load_settings(
        "trial", with_text(config, only_kinesis), environ={"CONSUMER_WORKER__MAX_RECORDS": "5000"}
    )
    assert reads(settings) == [5000, 5000]

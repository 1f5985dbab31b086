"""The Kinesis demo's load treats a refused put as the table demo's load treats a refused write:
retried with the same record while the refusal is a throttle or a server error, named when it is
anything else, and left out of the oracle when the load stops before Kinesis took it.

It retried every exception alike: a missing stream or a bad argument spun until the demo stopped the
load, and a load stopped while a put waited to be retried ended its thread with that put's
traceback instead of returning."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from consumer.records.kpl import deaggregate
from ground.settings import LoadSettings
from tests.unit.demo.test_load_refusals import Refusing, refusal
from tools.demo.kinesis_load import KinesisLoad
from tools.demo.load import LoadError

STREAM = "clicks"


class RefusingStream(Refusing):
    answer = {"ShardId": "shardId-000000000000", "SequenceNumber": "1"}
    put_record = Refusing._call


def load_on(stream: RefusingStream, oracle: Path) -> KinesisLoad:
    return KinesisLoad(stream, STREAM, LoadSettings(writes_per_second=2000, keys=10, seed=7), oracle)


def oracle_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def user_records(taken: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(partition key, counter) of every user record in the puts Kinesis took, aggregates opened."""
    return [
        (user.partition_key, json.loads(user.data)["n"])
        for put in taken
        for user in deaggregate(put["Data"], put["PartitionKey"]).records
    ]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ProvisionedThroughputExceededException", 400),
        ("KMSThrottlingException", 400),
        ("InternalFailure", 500),
    ],
)
def test_a_refused_put_is_put_again_with_the_same_record_and_recorded_once(
    tmp_path: Path, code: str, status: int
) -> None:
    stream = RefusingStream({2, 3, 4}, refusal(code, status))
    load = load_on(stream, tmp_path / "oracle.jsonl")

    load.run(duration_seconds=0.6)

    assert load.refused == 3
    assert stream.calls[1] == stream.calls[2] == stream.calls[3] == stream.calls[4] == stream.taken[1]
    oracle = [(line["key"], line["w"]) for line in oracle_lines(tmp_path / "oracle.jsonl")]
    assert oracle == user_records(stream.taken) and len(oracle) == load.writes > 10


@pytest.mark.parametrize(
    "error",
    [
        refusal("ResourceNotFoundException", 400),
        refusal("InvalidArgumentException", 400),
        refusal("AccessDeniedException", 400),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ],
    ids=["missing stream", "bad argument", "access denied", "no answer"],
)
def test_a_put_refused_for_good_stops_the_load_naming_the_stream_and_the_key(
    tmp_path: Path, error: Exception
) -> None:
    stream = RefusingStream({3}, error)
    load = load_on(stream, tmp_path / "oracle.jsonl")

    with pytest.raises(
        LoadError, match=r"the (stream clicks refused the )?put of key-\d{3} \(counters \[[\d, ]+\]\)"
    ):
        load.run(duration_seconds=5)

    assert len(stream.calls) == 3 and load.refused == 0  # not retried, not counted as refused
    assert load.writes == len(oracle_lines(tmp_path / "oracle.jsonl")) == len(user_records(stream.taken))


def test_a_load_stopped_while_a_put_is_refused_returns_and_leaves_that_put_out(tmp_path: Path) -> None:
    stream = RefusingStream(set(range(2, 10_000)), refusal("ProvisionedThroughputExceededException", 400))
    load = load_on(stream, tmp_path / "oracle.jsonl")
    timer = threading.Timer(0.3, load.stop)
    timer.start()
    try:
        written = load.run(duration_seconds=30)
    finally:
        timer.cancel()
    assert (
        written
        == load.writes
        == len(oracle_lines(tmp_path / "oracle.jsonl"))
        == len(user_records(stream.taken))
    )
    assert len(stream.taken) == 1 and load.refused >= 1


def test_on_its_thread_the_load_keeps_a_refusal_for_the_demo_to_report(tmp_path: Path) -> None:
    load = load_on(RefusingStream({1}, refusal("ResourceNotFoundException", 400)), tmp_path / "oracle.jsonl")
    thread = threading.Thread(target=load.run_reporting, args=(5,))
    thread.start()
    thread.join(timeout=10)

    assert not thread.is_alive()
    assert len(load.errors) == 1 and "ResourceNotFoundException" in str(load.errors[0])
    assert load.writes == 0

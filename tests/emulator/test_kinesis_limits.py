"""The emulator's Kinesis limits, retention and errors.

Time-driven behaviour (read debt, retention, expiry of iterators and NextTokens) runs in-process on
a fake clock through the same protocol layer the server uses (``handle_kinesis_call``), so it is
exact and quick; throttling, injected faults and bad requests are also checked over HTTP with boto3.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.config import EngineConfig
from emulator.faults import FaultSettings
from emulator.kinesis_api import handle_kinesis_call
from emulator.kinesis_engine import KinesisEngine
from emulator.testing import RunningEmulator
from ground.clock import FakeClock

DAY_MS = 600_000  # the emulator's 24 hours in these tests (trim_after_seconds = 600)


class Local:
    """A Kinesis engine on a fake clock, called through the JSON protocol."""

    def __init__(self, iterator_expiry_ms: int = 10 * DAY_MS, **faults: Any) -> None:
        self.clock = FakeClock()
        self.faults = FaultSettings().updated(faults) if faults else FaultSettings()
        config = EngineConfig(trim_after_ms=DAY_MS, iterator_expiry_ms=iterator_expiry_ms)
        self.engine = KinesisEngine(config, self.clock, lambda: self.faults)

    def call(self, operation: str, **params: Any) -> tuple[int, dict[str, Any]]:
        body = json.dumps(params).encode()
        status, answer, _ = handle_kinesis_call(
            self.engine, operation, body, "us-east-1", self.clock.monotonic_millis()
        )
        return status, answer

    def ok(self, operation: str, **params: Any) -> dict[str, Any]:
        status, answer = self.call(operation, **params)
        assert status == 200, answer
        return answer

    def error(self, operation: str, **params: Any) -> str:
        status, answer = self.call(operation, **params)
        assert status >= 400, answer
        return str(answer["__type"])

    def put(self, stream: str, data: bytes, key: str = "k") -> str:
        b64 = base64.b64encode(data).decode()
        return str(self.ok("PutRecord", StreamName=stream, Data=b64, PartitionKey=key)["SequenceNumber"])

    def iterator(self, stream: str, shard: str = "shardId-000000000000", **position: Any) -> str:
        position = position or {"ShardIteratorType": "TRIM_HORIZON"}
        return str(self.ok("GetShardIterator", StreamName=stream, ShardId=shard, **position)["ShardIterator"])


def test_read_throughput_is_a_debt_a_big_read_pays_off_over_seconds() -> None:
    local = Local(
        kinesis_read_bytes_per_second=1000.0,
        kinesis_write_bytes_per_second=10**9,
        kinesis_write_records_per_second=10**9,
    )
    local.ok("CreateStream", StreamName="s", ShardCount=1)
    for _ in range(5):
        local.put("s", b"x" * 999)  # 1 000 bytes with the key
    first = local.ok("GetRecords", ShardIterator=local.iterator("s"))
    # Served whole: 5 000 bytes against one second's budget leaves the shard 4 000 bytes in debt.
    assert len(first["Records"]) == 5
    local.clock.advance(1_000)
    assert (
        local.error("GetRecords", ShardIterator=first["NextShardIterator"])
        == "ProvisionedThroughputExceededException"
    )
    local.clock.advance(2_000)  # three seconds paid of four (the refused call cost nothing)
    assert (
        local.error("GetRecords", ShardIterator=first["NextShardIterator"])
        == "ProvisionedThroughputExceededException"
    )
    local.clock.advance(1_000)
    assert local.ok("GetRecords", ShardIterator=first["NextShardIterator"])["Records"] == []


def test_five_get_records_calls_per_second_per_shard() -> None:
    local = Local()
    local.ok("CreateStream", StreamName="s", ShardCount=2)
    iterator = local.iterator("s")
    for _ in range(5):
        iterator = local.ok("GetRecords", ShardIterator=iterator)["NextShardIterator"]
    assert local.error("GetRecords", ShardIterator=iterator) == "ProvisionedThroughputExceededException"
    other = local.iterator("s", "shardId-000000000001")
    local.ok("GetRecords", ShardIterator=other)  # another shard has its own budget
    local.clock.advance(200)
    local.ok("GetRecords", ShardIterator=iterator)


def test_get_records_caps_at_ten_thousand_records_and_ten_mebibytes() -> None:
    local = Local(
        kinesis_write_bytes_per_second=10**9,
        kinesis_write_records_per_second=10**9,
        kinesis_read_bytes_per_second=10**9,
    )
    local.ok("CreateStream", StreamName="s", ShardCount=1)
    entries = [{"Data": base64.b64encode(b"r").decode(), "PartitionKey": "k"}] * 500
    for _ in range(21):
        local.ok("PutRecords", StreamName="s", Records=entries)
    page = local.ok("GetRecords", ShardIterator=local.iterator("s"))
    assert len(page["Records"]) == 10_000
    assert (
        local.error("GetRecords", ShardIterator=page["NextShardIterator"], Limit=10_001)
        == "InvalidArgumentException"
    )
    big = Local(kinesis_write_bytes_per_second=10**9, kinesis_read_bytes_per_second=10**9)
    big.ok("CreateStream", StreamName="b", ShardCount=1)
    for _ in range(12):
        big.put("b", b"m" * (1024 * 1024 - 1))  # 1 MiB with the key
    assert len(big.ok("GetRecords", ShardIterator=big.iterator("b"))["Records"]) == 10


def test_writes_over_a_shards_limit_are_refused_record_by_record() -> None:
    local = Local(kinesis_write_records_per_second=3.0)
    local.ok("CreateStream", StreamName="s", ShardCount=1)
    entries = [{"Data": base64.b64encode(b"%d" % i).decode(), "PartitionKey": "k"} for i in range(5)]
    answer = local.ok("PutRecords", StreamName="s", Records=entries)
    assert answer["FailedRecordCount"] == 2
    assert [r.get("ErrorCode") for r in answer["Records"]] == [None] * 3 + [
        "ProvisionedThroughputExceededException"
    ] * 2
    assert (
        local.error("PutRecord", StreamName="s", Data="eA==", PartitionKey="k")
        == "ProvisionedThroughputExceededException"
    )
    local.clock.advance(1_000)
    local.ok("PutRecord", StreamName="s", Data="eA==", PartitionKey="k")
    volume = Local(kinesis_write_bytes_per_second=100.0)
    volume.ok("CreateStream", StreamName="v", ShardCount=1)
    volume.put("v", b"x" * 90)
    assert volume.error(
        "PutRecord", StreamName="v", Data=base64.b64encode(b"x" * 90).decode(), PartitionKey="k"
    ) == ("ProvisionedThroughputExceededException")


def test_retention_trims_records_and_expires_closed_shards_silently_for_iterators() -> None:
    local = Local()
    local.ok("CreateStream", StreamName="s", ShardCount=1)
    old = local.put("s", b"old")
    stale = local.iterator("s")
    at_old = local.iterator("s", ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=old)
    local.clock.advance(DAY_MS // 2)
    local.put("s", b"new")
    local.clock.advance(DAY_MS // 2 + 1)  # "old" is a day old: gone; "new" is half a day old
    for iterator in (stale, at_old, local.iterator("s")):
        assert [
            base64.b64decode(r["Data"]) for r in local.ok("GetRecords", ShardIterator=iterator)["Records"]
        ] == [b"new"]
    assert local.engine.counters["kinesis_reads_from_horizon"] == 2
    local.ok("IncreaseStreamRetentionPeriod", StreamName="s", RetentionPeriodHours=48)
    local.ok(
        "SplitShard", StreamName="s", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127)
    )
    local.clock.advance(DAY_MS + 1)  # "new" is 1.5 days old: kept for 48 h
    assert len(local.ok("GetRecords", ShardIterator=local.iterator("s"))["Records"]) == 1
    local.clock.advance(DAY_MS)  # 2.5 days: the closed parent is empty and closed 2 days ago
    listed = [s["ShardId"] for s in local.ok("ListShards", StreamName="s")["Shards"]]
    assert listed == ["shardId-000000000001", "shardId-000000000002"]
    assert local.error(
        "GetShardIterator", StreamName="s", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    ) == ("ResourceNotFoundException")
    assert (
        local.error("DecreaseStreamRetentionPeriod", StreamName="s", RetentionPeriodHours=72)
        == "InvalidArgumentException"
    )


def test_iterators_and_next_tokens_expire() -> None:
    local = Local(iterator_expiry_ms=300_000)
    local.ok("CreateStream", StreamName="s", ShardCount=3)
    iterator = local.iterator("s")
    page = local.ok("ListShards", StreamName="s", MaxResults=1)
    local.clock.advance(300_001)
    assert local.error("GetRecords", ShardIterator=iterator) == "ExpiredIteratorException"
    assert local.error("ListShards", NextToken=page["NextToken"]) == "ExpiredNextTokenException"


def test_list_shards_has_its_own_rate_per_stream() -> None:
    local = Local(list_shards_per_second=2.0)
    local.ok("CreateStream", StreamName="s", ShardCount=1)
    local.ok("CreateStream", StreamName="t", ShardCount=1)
    local.ok("ListShards", StreamName="s")
    local.ok("ListShards", StreamName="s")
    assert local.error("ListShards", StreamName="s") == "LimitExceededException"
    local.ok("ListShards", StreamName="t")


@pytest.mark.parametrize(
    ("operation", "params", "code"),
    [
        (
            "GetShardIterator",
            {"StreamName": "s", "ShardId": "shardId-000000000000", "ShardIteratorType": "AT_SEQUENCE_NUMBER"},
            "InvalidArgumentException",
        ),
        (
            "GetShardIterator",
            {"StreamName": "s", "ShardId": "shardId-000000000000", "ShardIteratorType": "SOON"},
            "InvalidArgumentException",
        ),
        (
            "GetShardIterator",
            {"StreamName": "s", "ShardId": "shardId-000000000000", "ShardIteratorType": "AT_TIMESTAMP"},
            "InvalidArgumentException",
        ),
        (
            "GetShardIterator",
            {
                "StreamName": "s",
                "ShardId": "shardId-000000000000",
                "ShardIteratorType": "AT_SEQUENCE_NUMBER",
                "StartingSequenceNumber": "1",
            },
            "InvalidArgumentException",
        ),
        (
            "GetShardIterator",
            {"StreamName": "s", "ShardId": "shardId-000000000009", "ShardIteratorType": "LATEST"},
            "ResourceNotFoundException",
        ),
        (
            "GetShardIterator",
            {"StreamName": "nope", "ShardId": "shardId-000000000000", "ShardIteratorType": "LATEST"},
            "ResourceNotFoundException",
        ),
        ("GetRecords", {"ShardIterator": "not-an-iterator"}, "InvalidArgumentException"),
        ("ListShards", {"StreamName": "s", "NextToken": "x"}, "InvalidArgumentException"),
        (
            "ListShards",
            {"StreamName": "s", "ShardFilter": {"Type": "AFTER_SHARD_ID"}},
            "InvalidArgumentException",
        ),
        ("ListShards", {}, "InvalidArgumentException"),
        ("CreateStream", {"StreamName": "s", "ShardCount": 1}, "ResourceInUseException"),
        ("CreateStream", {"StreamName": "p"}, "InvalidArgumentException"),
        (
            "MergeShards",
            {
                "StreamName": "s",
                "ShardToMerge": "shardId-000000000000",
                "AdjacentShardToMerge": "shardId-000000000002",
            },
            "InvalidArgumentException",
        ),
        (
            "SplitShard",
            {"StreamName": "s", "ShardToSplit": "shardId-000000000000", "NewStartingHashKey": "0"},
            "InvalidArgumentException",
        ),
        (
            "UpdateShardCount",
            {"StreamName": "s", "TargetShardCount": 7, "ScalingType": "UNIFORM_SCALING"},
            "InvalidArgumentException",
        ),
        ("PutRecord", {"StreamName": "s", "Data": "eA==", "PartitionKey": ""}, "InvalidArgumentException"),
        ("PutRecord", {"StreamName": "s", "Data": "!!", "PartitionKey": "k"}, "SerializationException"),
        ("Subscribe", {}, "UnknownOperationException"),
    ],
)
def test_bad_requests_get_kinesis_errors(operation: str, params: dict[str, Any], code: str) -> None:
    local = Local()
    local.ok("CreateStream", StreamName="s", ShardCount=3)
    assert local.error(operation, **params) == code


def test_a_body_that_is_not_json_is_a_serialization_error() -> None:
    local = Local()
    status, answer, _ = handle_kinesis_call(local.engine, "ListShards", b"{nope", "us-east-1", 0)
    assert (status, answer["__type"]) == (400, "SerializationException")


# ------------------------------------------------------------------------------------ over HTTP


def test_throttles_and_faults_reach_boto3_as_kinesis_errors(emulator: RunningEmulator) -> None:
    kinesis = emulator.client("kinesis", config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    kinesis.create_stream(StreamName="http-limits", ShardCount=1)
    iterator = kinesis.get_shard_iterator(
        StreamName="http-limits", ShardId="shardId-000000000000", ShardIteratorType="LATEST"
    )["ShardIterator"]
    emulator.control.set_faults(reads_per_shard_per_second=0.01)
    try:
        codes = set()
        for _ in range(3):
            try:
                iterator = kinesis.get_records(ShardIterator=iterator)["NextShardIterator"]
            except ClientError as exc:
                codes.add(exc.response["Error"]["Code"])
        assert codes == {"ProvisionedThroughputExceededException"}
    finally:
        emulator.control.set_faults(reads_per_shard_per_second=1000)
    emulator.control.set_faults(error_rate=1.0)
    try:
        with pytest.raises(ClientError) as exc:
            kinesis.list_shards(StreamName="http-limits")
    finally:
        emulator.control.set_faults(error_rate=0.0)
    assert exc.value.response["Error"]["Code"] == "InternalFailure"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    kinesis.put_record(StreamName="http-limits", Data=b"x", PartitionKey="k")
    assert emulator.control.kinesis_trim("http-limits") == 1
    (shard,) = emulator.control.kinesis_shards("http-limits")
    assert shard["records"] == 0 and shard["open"]
    counters = emulator.control.counters()
    assert counters["kinesis_faults_injected"] >= 1 and counters["kinesis_throttled"] >= 1


def test_millis_behind_latest_is_the_age_of_the_last_record_returned_until_the_tip() -> None:
    local = Local()
    local.ok("CreateStream", StreamName="s", ShardCount=1)
    local.put("s", b"first")
    local.clock.advance(5_000)
    local.put("s", b"second")
    local.clock.advance(1_000)
    behind = local.ok("GetRecords", ShardIterator=local.iterator("s"), Limit=1)
    assert behind["MillisBehindLatest"] == 6_000
    caught_up = local.ok("GetRecords", ShardIterator=behind["NextShardIterator"])
    assert [base64.b64decode(r["Data"]) for r in caught_up["Records"]] == [b"second"]
    assert caught_up["MillisBehindLatest"] == 0

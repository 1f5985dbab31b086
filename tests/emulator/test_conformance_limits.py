"""Conformance, continued: trimming, eventual consistency, throttling, injected faults, bad requests,
iterator expiry and the other services, driven only through boto3 (+ the control API)."""

from __future__ import annotations

import json
import urllib.request

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.testing import RunningEmulator, running_emulator
from tests.emulator.conftest import all_shards, error_code, make_table, no_retry_streams, read_shard


def test_trim_makes_old_positions_fail_loudly(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    ddb, streams = emulator.client("dynamodb"), emulator.client("dynamodbstreams")
    ddb.put_item(TableName=table, Item={"pk": {"S": "gone"}})
    shard = next(s for s in emulator.control.shards(table) if s["records"])["shardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    seq = read_shard(streams, arn, shard)[0]["dynamodb"]["SequenceNumber"]
    assert emulator.control.trim(table) == 1
    with pytest.raises(ClientError) as exc:
        streams.get_records(ShardIterator=it)
    assert error_code(exc) == "TrimmedDataAccessException"
    with pytest.raises(ClientError) as exc:
        streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard, ShardIteratorType="AT_SEQUENCE_NUMBER", SequenceNumber=seq
        )
    assert error_code(exc) == "TrimmedDataAccessException"
    fresh = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    assert streams.get_records(ShardIterator=fresh["ShardIterator"])["Records"] == []


def test_eventual_consistency_children_before_parent_closes(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    streams = emulator.client("dynamodbstreams")
    emulator.control.set_faults(consistency_delay_millis=60_000)
    try:
        created = emulator.control.rollover(table)
        shards = all_shards(streams, arn)
    finally:
        emulator.control.set_faults(consistency_delay_millis=0)
    assert set(created) <= {s["ShardId"] for s in shards}
    assert all("EndingSequenceNumber" not in s["SequenceNumberRange"] for s in shards)  # parents look open
    assert any("EndingSequenceNumber" in s["SequenceNumberRange"] for s in all_shards(streams, arn))


def test_eventual_consistency_closed_parent_before_children(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    streams = emulator.client("dynamodbstreams")
    emulator.control.set_faults(child_visibility_delay_millis=60_000)
    try:
        created = emulator.control.rollover(table)
        shards = all_shards(streams, arn)
    finally:
        emulator.control.set_faults(child_visibility_delay_millis=0)
    assert not set(created) & {s["ShardId"] for s in shards}
    assert all("EndingSequenceNumber" in s["SequenceNumberRange"] for s in shards)
    assert set(created) <= {s["ShardId"] for s in all_shards(streams, arn)}


def test_throttling_get_records_and_describe_stream(emulator: RunningEmulator) -> None:
    _, arn = make_table(emulator)
    streams = no_retry_streams(emulator)
    # Earlier tests share this emulator's DescribeStream bucket: look the shard up with retries.
    shard = all_shards(emulator.client("dynamodbstreams"), arn)[0]["ShardId"]
    # Slow refill (one call per 100 s) so a loaded machine cannot make the burst look compliant.
    emulator.control.set_faults(reads_per_shard_per_second=0.01, describe_stream_per_second=0.01)
    try:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")[
            "ShardIterator"
        ]
        codes = set()
        for _ in range(5):
            try:
                it = streams.get_records(ShardIterator=it)["NextShardIterator"]
            except ClientError as exc:
                codes.add(exc.response["Error"]["Code"])
        assert codes == {"LimitExceededException"}
        codes = set()
        for _ in range(3):
            try:
                streams.describe_stream(StreamArn=arn)
            except ClientError as exc:
                codes.add(exc.response["Error"]["Code"])
        assert codes == {"LimitExceededException"}
    finally:
        emulator.control.set_faults(reads_per_shard_per_second=1000, describe_stream_per_second=10)


def test_injected_faults_are_http_500(emulator: RunningEmulator) -> None:
    _, _arn = make_table(emulator)
    streams = no_retry_streams(emulator)
    emulator.control.set_faults(error_rate=1.0)
    try:
        with pytest.raises(ClientError) as exc:
            streams.list_streams()
    finally:
        emulator.control.set_faults(error_rate=0.0)
    assert error_code(exc) == "InternalServerError"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert emulator.control.counters()["faults_injected"] >= 1


def test_bad_requests_get_aws_shaped_errors(emulator: RunningEmulator) -> None:
    _table, arn = make_table(emulator)
    streams = emulator.client("dynamodbstreams")
    shard = all_shards(streams, arn)[0]["ShardId"]
    cases = [
        (lambda: streams.get_records(ShardIterator="not-an-iterator"), "ValidationException"),
        (
            lambda: streams.get_shard_iterator(
                StreamArn=arn, ShardId="shardId-00000000000000000000-deadbeef", ShardIteratorType="LATEST"
            ),
            "ResourceNotFoundException",
        ),
        (lambda: streams.describe_stream(StreamArn=arn + "x"), "ResourceNotFoundException"),
        (
            lambda: streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard, ShardIteratorType="AT_SEQUENCE_NUMBER"
            ),
            "ValidationException",
        ),
    ]
    for call, code in cases:
        with pytest.raises(ClientError) as exc:
            call()
        assert error_code(exc) == code
    # Raw HTTP: a bad iterator type and a body that is not JSON.
    for target, body in (
        ("GetShardIterator", json.dumps({"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "SOON"})),
        ("GetRecords", "{not json"),
    ):
        request = urllib.request.Request(
            emulator.endpoint,
            data=body.encode(),
            headers={
                "X-Amz-Target": f"DynamoDBStreams_20120810.{target}",
                "Content-Type": "application/x-amz-json-1.0",
            },
        )
        with pytest.raises(urllib.error.HTTPError) as http:
            urllib.request.urlopen(request, timeout=5)
        assert http.value.code == 400
        assert json.loads(http.value.read())["__type"].split("#")[1] in (
            "ValidationException",
            "SerializationException",
        )
    assert emulator.control.health()


def test_iterator_expiry() -> None:
    with running_emulator(partitions=1, iterator_expiry_seconds=0.3) as emu:
        _, arn = make_table(emu)
        streams = emu.client("dynamodbstreams")
        shard = all_shards(streams, arn)[0]["ShardId"]
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")[
            "ShardIterator"
        ]
        import time

        time.sleep(0.5)
        with pytest.raises(ClientError) as exc:
            streams.get_records(ShardIterator=it)
        assert error_code(exc) == "ExpiredIteratorException"


def test_other_services_are_served(emulator: RunningEmulator) -> None:
    emulator.client("s3").create_bucket(Bucket="changes")
    emulator.client("logs").create_log_group(logGroupName="/app/x")
    emulator.client("cloudwatch").put_metric_data(
        Namespace="n", MetricData=[{"MetricName": "m", "Value": 1.0}]
    )
    assert emulator.client("s3").list_buckets()["Buckets"][0]["Name"] == "changes"
    assert boto3 is not None


@pytest.mark.parametrize(
    ("setting", "code", "status"),
    [
        ("table_throttle_rate", "ProvisionedThroughputExceededException", 400),
        ("table_error_rate", "InternalServerError", 500),
    ],
)
def test_table_faults_refuse_dynamodb_calls_before_they_apply(
    emulator: RunningEmulator, setting: str, code: str, status: int
) -> None:
    name, _arn = make_table(emulator)
    ddb = emulator.client("dynamodb", config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    emulator.control.set_faults(**{setting: 1.0})
    try:
        with pytest.raises(ClientError) as exc:
            ddb.put_item(TableName=name, Item={"pk": {"S": "refused"}})
    finally:
        emulator.control.set_faults(**{setting: 0.0})
    assert error_code(exc) == code
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert "Item" not in ddb.get_item(TableName=name, Key={"pk": {"S": "refused"}})

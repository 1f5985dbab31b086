"""The DynamoDB Streams adapter through real botocore HTTP against canned responses on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.errors import (
    AccessDeniedError,
    ExpiredIteratorError,
    InvalidStreamRequestError,
    ShardNotFoundError,
    StreamGoneError,
    StreamNotFoundError,
    StreamSourceError,
    ThrottledError,
    TransientStreamError,
    TrimmedDataError,
)
from consumer.streams.source import Position
from consumer.streams.wire import parse_get_records
from ground.clock import FakeClock
from tests.functional.streams.canned_server import CannedStreams, error, ok, serve
from tests.unit.streams.corpus import corpus_records, get_records_body, record

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-23T00:00:00.000"
NOW = 1763798460_000


def client(endpoint: str, attempts: int = 1) -> Any:
    config = Config(
        retries={"mode": "standard", "total_max_attempts": attempts}, connect_timeout=5, read_timeout=10
    )
    return boto3.client("dynamodbstreams", endpoint_url=endpoint, region_name="us-east-1", config=config)


@pytest.fixture
def canned() -> Iterator[tuple[CannedStreams, DynamoDBStreamSource]]:
    with serve() as (server, endpoint):
        yield server, DynamoDBStreamSource(client(endpoint), FakeClock(NOW))


def shard(shard_id: str, parent: str | None = None, end: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"ShardId": shard_id, "SequenceNumberRange": {"StartingSequenceNumber": "100"}}
    if parent:
        item["ParentShardId"] = parent
    if end:
        item["SequenceNumberRange"]["EndingSequenceNumber"] = end
    return item


def description(shards: list[dict[str, Any]], last: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "StreamArn": ARN,
        "StreamLabel": "2026-11-23T00:00:00.000",
        "StreamStatus": "ENABLED",
        "StreamViewType": "NEW_AND_OLD_IMAGES",
        "TableName": "orders",
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "CreationRequestDateTime": 1763798000.0,
        "Shards": shards,
    }
    if last:
        body["LastEvaluatedShardId"] = last
    return {"StreamDescription": body}


def test_describe_stream_is_paged_to_the_end(canned: tuple[CannedStreams, DynamoDBStreamSource]) -> None:
    server, source = canned
    server.script(
        "DescribeStream",
        ok(
            description(
                [
                    shard("shardId-00000001763790000000-aaaa0001", end="199"),
                    shard("shardId-00000001763790000000-aaaa0002", "shardId-00000001763790000000-aaaa0001"),
                ],
                last="shardId-00000001763790000000-aaaa0002",
            )
        ),
        ok(
            description(
                [shard("shardId-00000001763790000000-aaaa0003", end="299")],
                last="shardId-00000001763790000000-aaaa0003",
            )
        ),
        ok(
            description(
                [shard("shardId-00000001763790000000-aaaa0004", "shardId-00000001763790000000-aaaa0003")]
            )
        ),
    )
    found = source.stream_description(ARN)
    assert [s.shard_id for s in found.shards] == [
        "shardId-00000001763790000000-aaaa0001",
        "shardId-00000001763790000000-aaaa0002",
        "shardId-00000001763790000000-aaaa0003",
        "shardId-00000001763790000000-aaaa0004",
    ]
    assert [s.is_open for s in found.shards] == [False, True, False, True]
    assert found.shards[1].parent_shard_id == "shardId-00000001763790000000-aaaa0001"
    assert (found.status, found.view_type, found.table_name) == ("ENABLED", "NEW_AND_OLD_IMAGES", "orders")
    starts = [c.get("ExclusiveStartShardId") for c in server.calls("DescribeStream")]
    assert starts == [None, "shardId-00000001763790000000-aaaa0002", "shardId-00000001763790000000-aaaa0003"]


def test_child_shards_use_the_filter(canned: tuple[CannedStreams, DynamoDBStreamSource]) -> None:
    server, source = canned
    server.script(
        "DescribeStream",
        ok(
            description(
                [
                    shard("shardId-00000001763790000000-cccc0001", "shardId-00000001763790000000-pppp0001"),
                    shard("shardId-00000001763790000000-cccc0002", "shardId-00000001763790000000-pppp0001"),
                    shard("shardId-00000001763790000000-0ther001", "shardId-00000001763790000000-qqqq0001"),
                ]
            )
        ),
    )
    children = source.child_shards(ARN, "shardId-00000001763790000000-pppp0001")
    assert [c.shard_id for c in children] == [
        "shardId-00000001763790000000-cccc0001",
        "shardId-00000001763790000000-cccc0002",
    ]
    (call,) = server.calls("DescribeStream")
    assert call["ShardFilter"] == {"Type": "CHILD_SHARDS", "ShardId": "shardId-00000001763790000000-pppp0001"}


def test_find_stream_takes_the_newest_and_names_the_fix_when_none(
    canned: tuple[CannedStreams, DynamoDBStreamSource],
) -> None:
    server, source = canned
    old = {
        "StreamArn": ARN.replace("2026-11-23", "2026-01-01"),
        "TableName": "orders",
        "StreamLabel": "2026-01-01",
    }
    new = {"StreamArn": ARN, "TableName": "orders", "StreamLabel": "2026-11-23T00:00:00.000"}
    server.script(
        "ListStreams", ok({"Streams": [new], "LastEvaluatedStreamArn": ARN}), ok({"Streams": [old]})
    )
    assert source.find_stream("orders") == ARN
    server.script("ListStreams", ok({"Streams": []}))
    with pytest.raises(StreamNotFoundError, match="update-table --table-name orders"):
        source.find_stream("orders")


def test_get_iterator_sends_the_position(canned: tuple[CannedStreams, DynamoDBStreamSource]) -> None:
    server, source = canned
    server.script("GetShardIterator", ok({"ShardIterator": "it-1"}))
    assert (
        source.get_iterator(
            ARN, "shardId-00000001763790000000-aaaa0001", Position.after("442158450000000001745043")
        )
        == "it-1"
    )
    assert (
        source.get_iterator(ARN, "shardId-00000001763790000000-aaaa0001", Position.trim_horizon()) == "it-1"
    )
    first, second = server.calls("GetShardIterator")
    assert first == {
        "StreamArn": ARN,
        "ShardId": "shardId-00000001763790000000-aaaa0001",
        "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
        "SequenceNumber": "442158450000000001745043",
    }
    assert second == {
        "StreamArn": ARN,
        "ShardId": "shardId-00000001763790000000-aaaa0001",
        "ShardIteratorType": "TRIM_HORIZON",
    }


def test_get_records_over_http_equals_the_parse_of_the_same_bytes(
    canned: tuple[CannedStreams, DynamoDBStreamSource],
) -> None:
    server, source = canned
    body = get_records_body(corpus_records(), next_iterator="it-2")
    server.script("GetRecords", lambda _request: (200, body))
    result = source.get_records("it-1", 1000, "shardId-00000001763790000000-aaaa0001")
    expected = parse_get_records(body, "shardId-00000001763790000000-aaaa0001", NOW)
    assert [r.raw for r in result.records] == [r.raw for r in expected.records]
    assert result.next_iterator == "it-2"
    assert result.millis_behind_latest == expected.millis_behind_latest == NOW - 1763798400_000
    assert server.calls("GetRecords") == [{"ShardIterator": "it-1", "Limit": 1000}]


def test_end_of_a_closed_shard(canned: tuple[CannedStreams, DynamoDBStreamSource]) -> None:
    server, source = canned
    server.script("GetRecords", ok({"Records": [record(1)]}))
    result = source.get_records("it-1", 10, "shardId-00000001763790000000-aaaa0001")
    assert result.shard_ended and result.next_iterator is None
    assert [r.sequence_number for r in result.records] == [record(1)["dynamodb"]["SequenceNumber"]]


def test_botocore_still_retries_a_500() -> None:
    with serve() as (server, endpoint):
        source = DynamoDBStreamSource(client(endpoint, attempts=3), FakeClock(NOW))
        server.script(
            "GetRecords",
            error("InternalServerError", "boom", 500),
            ok({"Records": [], "NextShardIterator": "n"}),
        )
        result = source.get_records("it-1", 10, "shardId-00000001763790000000-aaaa0001")
        assert result.next_iterator == "n"
        assert len(server.calls("GetRecords")) == 2


ERRORS = [
    ("GetRecords", "ExpiredIteratorException", "Iterator expired", 400, ExpiredIteratorError, "new iterator"),
    ("GetRecords", "TrimmedDataAccessException", "trimmed", 400, TrimmedDataError, "on_trimmed"),
    ("GetRecords", "LimitExceededException", "slow down", 400, ThrottledError, "back off"),
    ("GetRecords", "ResourceNotFoundException", "Stream arn:x not found", 400, StreamGoneError, "deleted"),
    (
        "GetShardIterator",
        "ResourceNotFoundException",
        "Shard does not exist",
        400,
        ShardNotFoundError,
        "shard sync",
    ),
    (
        "DescribeStream",
        "ResourceNotFoundException",
        "Stream not found",
        400,
        StreamNotFoundError,
        "existing_stream_arn",
    ),
    (
        "DescribeStream",
        "AccessDeniedException",
        "not authorized",
        400,
        AccessDeniedError,
        "grant dynamodb:DescribeStream",
    ),
    (
        "GetRecords",
        "AccessDeniedException",
        "not authorized",
        400,
        AccessDeniedError,
        "grant dynamodb:GetRecords",
    ),
    ("GetRecords", "InternalServerError", "oops", 500, TransientStreamError, "retry later"),
    ("GetRecords", "UnrecognizedClientException", "bad token", 400, AccessDeniedError, "credentials"),
    (
        "GetRecords",
        "ValidationException",
        "Invalid ShardIterator",
        400,
        InvalidStreamRequestError,
        "malformed",
    ),
    (
        "DescribeStream",
        "ValidationException",
        "Invalid StreamArn",
        400,
        StreamNotFoundError,
        "fix the stream ARN",
    ),
    ("GetRecords", "SomethingNewException", "what", 400, StreamSourceError, "unexpected"),
]


@pytest.mark.parametrize(("operation", "code", "message", "status", "expected", "fix"), ERRORS)
def test_each_service_error_maps_to_a_typed_error_that_names_the_fix(
    canned: tuple[CannedStreams, DynamoDBStreamSource],
    operation: str,
    code: str,
    message: str,
    status: int,
    expected: type[StreamSourceError],
    fix: str,
) -> None:
    server, source = canned
    server.script(operation, error(code, message, status))
    with pytest.raises(expected, match=fix) as caught:
        if operation == "GetRecords":
            source.get_records("it-1", 10, "shardId-00000001763790000000-aaaa0001")
        elif operation == "GetShardIterator":
            source.get_iterator(ARN, "shardId-00000001763790000000-aaaa0001", Position.latest())
        else:
            source.stream_description(ARN)
    assert isinstance(caught.value.__cause__, ClientError)
    assert code in str(caught.value)


def test_a_proxy_error_page_is_transient(canned: tuple[CannedStreams, DynamoDBStreamSource]) -> None:
    server, source = canned
    server.script("GetRecords", (502, b"<html>Bad Gateway</html>"))
    with pytest.raises(TransientStreamError):
        source.get_records("it-1", 10, "shardId-00000001763790000000-aaaa0001")


def test_unreachable_endpoint_is_transient() -> None:
    with serve() as (_, endpoint):
        pass  # the port is closed again now
    source = DynamoDBStreamSource(client(endpoint), FakeClock(NOW))
    with pytest.raises(TransientStreamError, match="endpoint_url"):
        source.get_records("it-1", 10, "shardId-00000001763790000000-aaaa0001")


def test_bad_arguments_fail_before_any_request(canned: tuple[CannedStreams, DynamoDBStreamSource]) -> None:
    server, source = canned
    with pytest.raises(StreamNotFoundError, match="not a DynamoDB stream ARN"):
        source.stream_description("arn:aws:dynamodb:us-east-1:123456789012:table/orders")
    with pytest.raises(ValueError, match="max_records"):
        source.get_records("it", 1001, "shardId-00000001763790000000-aaaa0001")
    assert server.requests == []


def test_threads_sharing_one_adapter_each_get_their_own_records(
    canned: tuple[CannedStreams, DynamoDBStreamSource],
) -> None:
    """The worker's fetch threads share one client: raw bodies never cross between concurrent calls."""
    server, source = canned

    def by_iterator(request: dict[str, Any]) -> tuple[int, bytes]:
        n = int(request["ShardIterator"].rpartition("-")[2])
        return 200, get_records_body(
            [record(n * 1000 + i) for i in range(n % 5 + 1)], next_iterator=f"next-{n}"
        )

    server.script("GetRecords", by_iterator)

    def read(n: int) -> tuple[int, list[str], str | None]:
        result = source.get_records(f"it-{n}", 100, f"shard-{n}")
        assert all(r.shard_id == f"shard-{n}" for r in result.records)
        return n, [r.event_id for r in result.records], result.next_iterator

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(read, range(40)))
    for n, event_ids, next_iterator in results:
        assert event_ids == [f"evt-{n * 1000 + i:08d}" for i in range(n % 5 + 1)]
        assert next_iterator == f"next-{n}"

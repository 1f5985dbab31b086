"""DescribeStream is an account-wide budget: calls are paced, and a refused page is asked again
rather than restarting a listing of hundreds of pages."""

from __future__ import annotations

import random

import boto3
import pytest
from botocore.stub import Stubber

from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.errors import ThrottledError
from consumer.streams.pacing import PAGE_ATTEMPTS, CallPacer
from ground.clock import FakeClock

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-24T00:00:00.000"


def sid(name: str) -> str:
    """A shard id of the service's shape (botocore validates stubbed answers)."""
    return f"shardId-00000001795501876904-{name:0>8}"


def page(ids: list[str], last: str | None) -> dict[str, object]:
    description: dict[str, object] = {
        "StreamArn": ARN,
        "StreamStatus": "ENABLED",
        "Shards": [
            {"ShardId": sid(i), "SequenceNumberRange": {"StartingSequenceNumber": "1" * 21}} for i in ids
        ],
    }
    if last:
        description["LastEvaluatedShardId"] = sid(last)
    return {"StreamDescription": description}


def source(clock: FakeClock, pacer: CallPacer | None = None) -> tuple[DynamoDBStreamSource, Stubber]:
    client = boto3.client(
        "dynamodbstreams", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    return DynamoDBStreamSource(client, clock, describe_pacer=pacer, rng=random.Random(1)), Stubber(client)


def test_a_throttled_page_is_asked_again_without_restarting_the_listing() -> None:
    clock = FakeClock()
    streams, stub = source(clock)
    stub.add_response("describe_stream", page(["s1", "s2"], "s2"), {"StreamArn": ARN, "Limit": 100})
    for _ in range(2):
        stub.add_client_error("describe_stream", service_error_code="LimitExceededException")
    stub.add_response(
        "describe_stream",
        page(["s3"], None),
        {"StreamArn": ARN, "Limit": 100, "ExclusiveStartShardId": sid("s2")},
    )
    with stub:
        shards = streams.list_shards(ARN)
    stub.assert_no_pending_responses()
    assert [s.shard_id for s in shards] == [sid("s1"), sid("s2"), sid("s3")]
    assert clock.monotonic_millis() > 0  # it waited (on the clock) before asking again


def test_a_page_refused_every_time_fails_the_listing_after_a_bounded_number_of_attempts() -> None:
    clock = FakeClock()
    streams, stub = source(clock)
    for _ in range(PAGE_ATTEMPTS):
        stub.add_client_error("describe_stream", service_error_code="LimitExceededException")
    with stub, pytest.raises(ThrottledError):
        streams.list_shards(ARN)
    stub.assert_no_pending_responses()


def test_the_pacer_spaces_calls_at_its_rate_after_the_burst() -> None:
    clock = FakeClock()
    pacer = CallPacer(2.0, clock, burst=3)
    start = clock.monotonic_millis()
    for _ in range(11):
        pacer.acquire()
    # 3 at once, then one every 500 ms: 8 more take 4 s.
    assert clock.monotonic_millis() - start == pytest.approx(4_000, abs=2)


def test_a_paced_listing_of_many_pages_keeps_to_the_rate() -> None:
    clock = FakeClock()
    streams, stub = source(clock, CallPacer(2.0, clock, burst=1))
    pages = 10
    for n in range(pages):
        expected = {"StreamArn": ARN, "Limit": 100}
        if n:
            expected["ExclusiveStartShardId"] = sid(f"s{n - 1}")
        stub.add_response("describe_stream", page([f"s{n}"], f"s{n}" if n < pages - 1 else None), expected)
    with stub:
        assert len(streams.list_shards(ARN)) == pages
    assert clock.monotonic_millis() - FakeClock().monotonic_millis() == pytest.approx(4_500, abs=2)

"""The adapter against moto's DynamoDB Streams: the same values a stock boto3 consumer reads, end to end."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import boto3
import pytest
from boto3.dynamodb.types import TypeDeserializer

from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.errors import StreamNotFoundError
from consumer.streams.source import Position
from ground.clock import FakeClock
from tests.support import moto_server
from tests.unit.streams.boto_reference import canonical


@pytest.fixture
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


def clients(endpoint: str) -> tuple[Any, Any]:
    session = boto3.session.Session(region_name="us-east-1")
    return session.client("dynamodb", endpoint_url=endpoint), session.client(
        "dynamodbstreams", endpoint_url=endpoint
    )


def test_reads_what_boto3_reads(endpoint: str) -> None:
    dynamodb, streams = clients(endpoint)
    dynamodb.create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    item = {
        "pk": {"S": "a"},
        "n": {"N": "12345678901234567890123456789012345678"},
        "b": {"B": b"\x00\xff"},
        "ss": {"SS": ["x", "y"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": [b"\x01", b"\x02"]},
        "m": {"M": {"l": {"L": [{"NULL": True}, {"BOOL": False}]}}},
    }
    dynamodb.put_item(TableName="orders", Item=item)
    dynamodb.put_item(TableName="orders", Item={**item, "n": {"N": "-1E-130"}})
    dynamodb.delete_item(TableName="orders", Key={"pk": {"S": "a"}})

    source = DynamoDBStreamSource(streams, FakeClock())
    arn = source.find_stream("orders")
    description = source.stream_description(arn)
    assert description.view_type == "NEW_AND_OLD_IMAGES" and description.table_name == "orders"
    (shard,) = description.shards
    ours = source.get_records(
        source.get_iterator(arn, shard.shard_id, Position.trim_horizon()), 100, shard.shard_id
    )
    stock_iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard.shard_id, ShardIteratorType="TRIM_HORIZON"
    )
    # The same client, used directly, still parses the stock way: the adapter only takes its own calls.
    theirs = streams.get_records(ShardIterator=stock_iterator["ShardIterator"], Limit=100)["Records"]

    assert [r.event_name for r in ours.records] == ["INSERT", "MODIFY", "REMOVE"]
    deserializer = TypeDeserializer()
    for mine, stock in zip(ours.records, theirs, strict=True):
        assert mine.sequence_number == stock["dynamodb"]["SequenceNumber"]
        for name, value in (("NewImage", mine.new_image), ("OldImage", mine.old_image)):
            expected = stock["dynamodb"].get(name)
            expected = (
                None if expected is None else {k: deserializer.deserialize(v) for k, v in expected.items()}
            )
            assert canonical(value) == canonical(expected)
    assert ours.records[1].new_image is not None and ours.records[1].new_image["n"] == Decimal("-1E-130")
    assert ours.next_iterator is not None  # the shard is still open

    with pytest.raises(StreamNotFoundError, match="update-table"):
        source.find_stream("no-such-table")

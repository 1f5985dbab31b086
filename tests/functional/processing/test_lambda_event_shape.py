"""The event a Lambda handler gets here, compared field by field with the event AWS documents.

The documented changes — an INSERT, a MODIFY and a REMOVE of the Lambda Developer Guide's item, a
delete by Time to Live, an item of every attribute type — are made on the emulator, read back
through the worker's own GetRecords path, and turned into Lambda's event by the Lambda form. Each
record then has exactly the documented fields, each of the documented type, with the documented
values wherever a value does not vary from record to record (lambda_documented_events.py). The
event is also read by Powertools' pydantic model of Lambda's DynamoDB Streams event.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import DynamoDBStreamModel

from consumer.processing.lambda_event import streams_event, window_event
from consumer.records import StreamRecord, WireRecord
from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.reader import ShardReader
from emulator.testing import RunningEmulator, running_emulator
from tests.functional.processing import lambda_documented_events as documented

TABLE = "ExampleTableWithStream"
ARN_FORM = re.compile(r"^arn:aws:dynamodb:[a-z0-9-]+:\d{12}:table/[A-Za-z0-9_.-]+/stream/\S+$")
ISO_SECOND = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
SET_TYPES = ("SS", "NS", "BS")


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with running_emulator(partitions=1, rollover_seconds=3600) as running:
        yield running


Changes = tuple[str, list[StreamRecord], float, float]


@pytest.fixture(scope="module")
def changes(emulator: RunningEmulator) -> Changes:
    """The documented changes, in order; the stream's ARN, its records and the time they took."""
    emu = emulator
    ddb = emu.client("dynamodb")
    arn = ddb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "Id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "Id", "AttributeType": "N"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]["LatestStreamArn"]
    started = time.time()
    ddb.put_item(TableName=TABLE, Item=documented.NEW_ITEM)
    ddb.put_item(TableName=TABLE, Item=documented.CHANGED_ITEM)
    ddb.delete_item(TableName=TABLE, Key=documented.KEYS)
    ddb.put_item(TableName=TABLE, Item=documented.TTL_ITEM)
    assert emu.control.ttl_delete(TABLE, {"Id": {"N": "102"}})
    ddb.put_item(TableName=TABLE, Item=as_boto3(documented.EVERY_TYPE_ITEM))
    finished = time.time()
    reader = ShardReader(DynamoDBStreamSource(emu.client("dynamodbstreams")), arn)
    (shard,) = reader.list_shards()
    result = reader.fetch(shard.shard_id, reader.iterator_at(shard.shard_id, "TRIM_HORIZON"), 1000)
    return arn, list(result.records), started, finished


def as_boto3(value: Any) -> Any:
    """DynamoDB JSON as boto3 takes it: binaries as bytes (boto3 base64-encodes them itself)."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v)
            if k == "B"
            else [base64.b64decode(b) for b in v]
            if k == "BS"
            else as_boto3(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [as_boto3(v) for v in value]
    return value


def canonical(value: Any) -> Any:
    """DynamoDB JSON with its sets sorted (a set's members come back in any order)."""
    if isinstance(value, dict):
        return {k: sorted(v) if k in SET_TYPES else canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def compare(ours: dict[str, Any], expected: dict[str, Any], arn: str, window: tuple[float, float]) -> None:
    """Field by field: the same fields at every level, of the same types; varying values by form,
    every other value by equality."""
    assert set(ours) == set(expected)
    assert set(ours["dynamodb"]) == set(expected["dynamodb"])
    for name, value in [*ours.items(), *ours["dynamodb"].items()]:
        if name == "dynamodb":
            continue
        want = expected[name] if name in expected else expected["dynamodb"][name]
        assert type(value) is type(want), f"{name}: {type(value).__name__}, documented {type(want).__name__}"
        if name not in documented.VARYING:
            assert canonical(value) == canonical(want), name
    assert ours["eventID"]
    assert ours["eventSourceARN"] == arn and ARN_FORM.match(arn) and ARN_FORM.match(documented.DOCUMENTED_ARN)
    created = ours["dynamodb"]["ApproximateCreationDateTime"]
    assert created.is_integer() and window[0] - 1 <= created <= window[1]
    assert ours["dynamodb"]["SequenceNumber"].isdigit() and ours["dynamodb"]["SizeBytes"] > 0


def test_the_event_has_the_documented_fields_types_and_values_for_every_kind_of_change(
    changes: Changes,
) -> None:
    arn, records, started, finished = changes
    assert all(isinstance(r, WireRecord) for r in records)  # the worker's own held form
    event = streams_event(records, arn)
    assert list(event) == ["Records"]
    ttl_insert = documented._record("INSERT", {"Keys": {"Id": {"N": "102"}}, "NewImage": documented.TTL_ITEM})
    expected = [
        documented.INSERT,
        documented.MODIFY,
        documented.REMOVE,
        ttl_insert,
        documented.TTL_DELETE,
        documented.EVERY_TYPE_INSERT,
    ]
    assert len(event["Records"]) == len(expected)
    for ours, want in zip(event["Records"], expected, strict=True):
        compare(ours, want, arn, (started, finished))
    numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"]]
    assert numbers == sorted(numbers)
    assert "userIdentity" not in event["Records"][2]  # a delete by a user is not a TTL delete
    parsed = DynamoDBStreamModel.model_validate(event)  # Powertools' model of Lambda's event
    assert parsed.Records[4].userIdentity is not None
    assert parsed.Records[4].userIdentity.principalId == "dynamodb.amazonaws.com"


def test_the_window_event_has_the_documented_fields(changes: Changes) -> None:
    arn, records, _, _ = changes
    shard_id = records[0].shard_id
    event = window_event(
        records[:2],
        arn,
        shard_id=shard_id,
        start=1596128400.0,
        end=1596128700.0,
        state={"1": "state1"},
        final=False,
    )
    assert set(event) == {"Records", *documented.WINDOW_EVENT_FIELDS}
    for name, want in documented.WINDOW_EVENT_FIELDS.items():
        assert type(event[name]) is type(want), name
    assert event["window"] == documented.WINDOW_EVENT_FIELDS["window"]  # the guide's 17:00-17:05 window
    assert all(ISO_SECOND.match(bound) for bound in event["window"].values())
    assert (event["shardId"], event["eventSourceARN"], event["state"]) == (shard_id, arn, {"1": "state1"})

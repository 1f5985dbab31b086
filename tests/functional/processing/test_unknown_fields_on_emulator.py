"""Fields a consumer does not know, sent by the emulator, reach a Lambda handler's event untouched.

The emulator (``emulator.unknown_record_fields``) adds ``ApproximateCreationDateTimePrecision`` to
every record's ``dynamodb`` and a top-level object no service sends. The records are read through
the worker's own GetRecords path (botocore over HTTP, the raw body kept from botocore's parser, the
fast record path) and handed to a Lambda handler by the Lambda form's adapter, which invokes it as
Lambda does: the handler's event has both fields as the emulator wrote them, and Powertools' model
of Lambda's event still reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import DynamoDBStreamModel

from consumer.processing.api import Batch
from consumer.processing.lambda_form import Invoker, LambdaBatchHandler, LambdaEnvironment, LambdaFunction
from consumer.records import ShardInfo, WireRecord
from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.reader import ShardReader
from emulator.records import UNKNOWN_TOP_LEVEL
from emulator.testing import RunningEmulator, running_emulator
from ground.clock import FakeClock

TABLE = "orders"


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with running_emulator(partitions=1, rollover_seconds=3600, unknown_record_fields=True) as running:
        yield running


def test_unknown_fields_from_the_stream_reach_the_lambda_handler_untouched(emulator: RunningEmulator) -> None:
    ddb = emulator.client("dynamodb")
    arn = ddb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]["LatestStreamArn"]
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "a"}, "n": {"N": "1"}})
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "a"}, "n": {"N": "2"}})
    ddb.delete_item(TableName=TABLE, Key={"pk": {"S": "a"}})

    streams = emulator.client("dynamodbstreams")
    reader = ShardReader(DynamoDBStreamSource(streams), arn)
    (shard,) = reader.list_shards()
    result = reader.fetch(shard.shard_id, reader.iterator_at(shard.shard_id, "TRIM_HORIZON"), 1000)
    records = result.records
    assert [r.event_name for r in records] == ["INSERT", "MODIFY", "REMOVE"]
    assert all(type(r) is WireRecord for r in records)  # held on the fast path, unknown fields or not
    for record in records:
        raw = record.raw
        assert raw["dynamodb"]["ApproximateCreationDateTimePrecision"] == "MILLISECOND"
        for name, value in UNKNOWN_TOP_LEVEL.items():
            assert raw[name] == value

    events: list[dict[str, Any]] = []

    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        events.append(event)
        return {"batchItemFailures": []}

    invoker = Invoker(
        lambda_handler,
        LambdaFunction("orders-stream"),
        LambdaEnvironment(lambda: arn, "/aws/lambda/orders-stream", "worker-1"),
        FakeClock(),
    )
    handler = LambdaBatchHandler(invoker)
    assert handler(Batch(ShardInfo(shard.shard_id), records, 0)) is None
    (event,) = events
    assert len(event["Records"]) == 3
    for ours, record in zip(event["Records"], records, strict=True):
        assert ours["dynamodb"]["ApproximateCreationDateTimePrecision"] == "MILLISECOND"
        for name, value in UNKNOWN_TOP_LEVEL.items():
            assert ours[name] == value
        raw = dict(record.raw)
        assert {k: v for k, v in ours.items() if k != "eventSourceARN"} == raw
    assert event["Records"][2]["dynamodb"]["OldImage"] == {"pk": {"S": "a"}, "n": {"N": "2"}}
    parsed = DynamoDBStreamModel.model_validate(event)  # a Powertools handler still reads the event
    assert [r.eventName for r in parsed.Records] == ["INSERT", "MODIFY", "REMOVE"]

"""The Lambda form on a Kinesis stream: the handler receives Lambda's Kinesis event (one event record
per user record, data base64, eventSource aws:kinesis) and its batchItemFailures name sequence numbers;
the batch resumes at the first user record of the lowest one named (all of its aggregate's user
records again), checkpointing inside the aggregate before it."""

from __future__ import annotations

import base64
from typing import Any

from consumer.processing import InMemoryCheckpointer, ProcessRecordsInput
from consumer.processing.factory import function_processor
from consumer.processing.lambda_event import LambdaContext
from consumer.processing.lambda_form import Invoker, LambdaBatchHandler, LambdaEnvironment, LambdaFunction
from consumer.processing.retry import RetryPolicy
from consumer.records import ShardInfo
from consumer.records.kinesis_record import KinesisRecord
from consumer.records.kinesis_stream_record import KinesisStreamRecord
from ground.clock import FakeClock

SHARD = "shardId-000000000003"
ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks"
ENVIRONMENT = LambdaEnvironment(lambda: ARN, "/clicks/application", "worker-1")


def users() -> tuple[KinesisStreamRecord, ...]:
    """Sequence 100: a plain record; 200: an aggregate of three; 300: a plain record."""
    plain = [KinesisRecord(SHARD, s, 0, f"p{s}", f"data-{s}".encode(), 1.7e9) for s in ("100", "300")]
    aggregate = [
        KinesisRecord(SHARD, "200", n, f"a{n}", f"data-200.{n}".encode(), 1.7e9, aggregated=True)
        for n in range(3)
    ]
    return tuple(KinesisStreamRecord(r) for r in (plain[0], *aggregate, plain[1]))


def test_a_lambda_handler_gets_the_kinesis_event_and_resumes_at_the_lowest_failed_sequence() -> None:
    events: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        events.append(event)
        numbers = [r["kinesis"]["sequenceNumber"] for r in event["Records"]]
        failed = ["300", "200"] if len(events) == 1 else []
        assert context.invoked_function_arn == "arn:aws:lambda:eu-west-1:123456789012:function:clicks-fn"
        return {"batchItemFailures": [{"itemIdentifier": n} for n in failed if n in numbers]}

    function = LambdaFunction.from_options({}, "clicks-fn")
    processor = function_processor(
        LambdaBatchHandler(Invoker(handler, function, ENVIRONMENT, FakeClock())),
        clock=FakeClock(),
        policy=RetryPolicy(bisect_on_error=False),
    )
    records = users()
    checkpointer = InMemoryCheckpointer(SHARD)
    checkpointer.delivered(records[-1].position)
    processor.process_records(ProcessRecordsInput(records, checkpointer, 0, ShardInfo(SHARD)))

    first = events[0]["Records"]
    assert [r["kinesis"]["sequenceNumber"] for r in first] == ["100", "200", "200", "200", "300"]
    assert first[1] == {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": "a0",
            "sequenceNumber": "200",
            "data": base64.b64encode(b"data-200.0").decode(),
            "approximateArrivalTimestamp": 1.7e9,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{SHARD}:200",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/clicks-fn",
        "awsRegion": "eu-west-1",
        "eventSourceARN": ARN,
    }
    # The lowest failed is 200: its three user records and 300 again; 100 checkpointed before them.
    assert [r["kinesis"]["partitionKey"] for r in events[1]["Records"]] == ["a0", "a1", "a2", "p300"]
    assert checkpointer.history == ["100", "300"]


def test_a_class_or_function_handler_sees_each_user_record_with_its_position() -> None:
    seen: list[tuple[str, int, str, bytes]] = []

    def handle(batch: Any) -> None:
        seen.extend(
            (r.sequence_number, r.sub_sequence_number, r.partition_key, r.data) for r in batch.records
        )

    processor = function_processor(handle, clock=FakeClock(), batch_size=2)
    records = users()
    checkpointer = InMemoryCheckpointer(SHARD)
    checkpointer.delivered(records[-1].position)
    processor.process_records(ProcessRecordsInput(records, checkpointer, 0, ShardInfo(SHARD)))
    assert [(s, n) for s, n, _, _ in seen] == [("100", 0), ("200", 0), ("200", 1), ("200", 2), ("300", 0)]
    # Spans of two: the checkpoints stop inside the aggregate, at (200, 0) and (200, 2).
    assert checkpointer.history == ["200", "200.2", "300"]

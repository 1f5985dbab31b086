"""Lambda's Kinesis event from user records, and a partial failure's resume point."""

from __future__ import annotations

import base64

import pytest

from consumer.processing.kinesis_event import kinesis_event, retry_from
from consumer.records.kinesis_record import KinesisRecord, user_records
from tests.kpl_format import User, aggregate

ARN = "arn:aws:kinesis:us-east-2:123456789012:stream/lambda-stream"
ROLE = "arn:aws:iam::123456789012:role/lambda-role"
SHARD = "shardId-000000000006"


def batch() -> list[KinesisRecord]:
    wire = [
        {
            "SequenceNumber": "100",
            "PartitionKey": "1",
            "Data": b"Hello, this is a test.",
            "ApproximateArrivalTimestamp": 1545084650.987,
        },
        {
            "SequenceNumber": "200",
            "PartitionKey": "agg",
            "Data": aggregate([User("a", b"x"), User("b", b"y")]),
            "ApproximateArrivalTimestamp": 1545084651.0,
        },
        {
            "SequenceNumber": "300",
            "PartitionKey": "3",
            "Data": b"last",
            "ApproximateArrivalTimestamp": 1545084652.5,
        },
    ]
    return [user for record in wire for user in user_records(SHARD, record)]


def test_the_event_has_lambdas_shape_one_record_per_user_record() -> None:
    event = kinesis_event(batch(), ARN, ROLE)
    first = event["Records"][0]
    assert first == {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": "1",
            "sequenceNumber": "100",
            "data": "SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==",
            "approximateArrivalTimestamp": 1545084650.987,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": "shardId-000000000006:100",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": ROLE,
        "awsRegion": "us-east-2",
        "eventSourceARN": ARN,
    }
    users = event["Records"][1:3]
    assert [(r["kinesis"]["partitionKey"], base64.b64decode(r["kinesis"]["data"])) for r in users] == [
        ("a", b"x"),
        ("b", b"y"),
    ]
    assert {r["kinesis"]["sequenceNumber"] for r in users} == {"200"}


def test_a_partial_failure_resumes_at_the_first_user_record_of_the_lowest_named() -> None:
    records = batch()
    assert retry_from(records, []) is None
    assert retry_from(records, ["300", "200"]) == 1  # both user records of 200 again, then 300
    assert retry_from(records, ["100"]) == 0
    with pytest.raises(ValueError, match="no sequenceNumber of this batch"):
        retry_from(records, ["999"])

"""AWS Lambda's Kinesis event, built from a shard's records, and where a partial failure resumes.

What Lambda sends for a Kinesis data stream, from AWS's documentation of Kinesis events: the event is
``{"Records": [...]}``, each record::

    {"kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": ..., "sequenceNumber": ...,
                 "data": <base64>, "approximateArrivalTimestamp": <epoch seconds, float>},
     "eventSource": "aws:kinesis", "eventVersion": "1.0",
     "eventID": "<shard id>:<sequence number>", "eventName": "aws:kinesis:record",
     "invokeIdentityArn": <the function's execution role>, "awsRegion": ..., "eventSourceARN": <stream>}

Lambda does not de-aggregate KPL records; a handler written for it either ignores aggregation or
de-aggregates ``data`` itself, and a user record's data is not an aggregate, so passing user records
(one event record each, under its Kinesis record's sequence number) runs both kinds unchanged.

A partial failure names Kinesis sequence numbers (``batchItemFailures[].itemIdentifier``); as on
Lambda, the batch resumes at the lowest one named, so every user record of that Kinesis record and
all after it are delivered again (:func:`retry_from`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from consumer.records.kinesis_record import KinesisRecord


def _region(stream_arn: str) -> str:
    parts = stream_arn.split(":")
    return parts[3] if len(parts) > 3 else ""


def execution_role_arn(stream_arn: str, function_name: str) -> str:
    """``invokeIdentityArn``: Lambda puts the function's execution role there. A worker runs the
    handler under its own role, which has no such name; the event names a role called after the
    function in the stream's partition and account, an IAM role ARN of the documented form."""
    parts = stream_arn.split(":", 5)
    partition, account = (parts[1], parts[4]) if len(parts) == 6 else ("aws", "")
    return f"arn:{partition}:iam::{account}:role/{function_name or 'handler'}"


def kinesis_lambda_record(record: KinesisRecord, stream_arn: str, invoke_identity_arn: str) -> dict[str, Any]:
    """One record of Lambda's Kinesis event."""
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": record.partition_key,
            "sequenceNumber": record.sequence_number,
            "data": base64.b64encode(record.data).decode("ascii"),
            "approximateArrivalTimestamp": record.approximate_arrival_timestamp,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{record.shard_id}:{record.sequence_number}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": invoke_identity_arn,
        "awsRegion": _region(stream_arn),
        "eventSourceARN": stream_arn,
    }


def kinesis_event(
    records: Sequence[KinesisRecord], stream_arn: str, invoke_identity_arn: str
) -> dict[str, Any]:
    """Lambda's Kinesis event for one batch of one shard's records, in shard order."""
    return {"Records": [kinesis_lambda_record(r, stream_arn, invoke_identity_arn) for r in records]}


def retry_from(records: Sequence[KinesisRecord], failed_sequence_numbers: Sequence[str]) -> int | None:
    """The index of the first record to deliver again: the first user record of the lowest Kinesis
    record named failed (None: none named, the batch succeeded). A sequence number of no record of
    the batch raises ValueError (Lambda counts such a response a failure of the whole batch)."""
    if not failed_sequence_numbers:
        return None
    first_index: dict[str, int] = {}
    for index, record in enumerate(records):
        first_index.setdefault(record.sequence_number, index)
    strangers = [s for s in failed_sequence_numbers if s not in first_index]
    if strangers:
        raise ValueError(
            f"batchItemFailures names {', '.join(strangers[:5])}, no sequenceNumber of this batch"
        )
    return min(first_index[s] for s in failed_sequence_numbers)

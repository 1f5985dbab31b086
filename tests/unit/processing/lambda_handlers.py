"""Lambda handlers as their users write them, imported by path in the Lambda form's tests."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
REFUSED = {"item-3"}  # the record handler raises on these keys
SEEN: list[str] = []


def record_handler(record: DynamoDBRecord) -> None:
    assert record.dynamodb is not None
    key = record.dynamodb.keys["pk"]
    if key in REFUSED:
        raise ValueError(f"cannot take {key}")
    SEEN.append(record.dynamodb.sequence_number or "")


def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )


def one_argument(event: dict[str, Any]) -> None:
    return None


class NotAFunction:
    def __init__(self, event: dict[str, Any], context: Any) -> None:
        self.event = event

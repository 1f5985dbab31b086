"""An orders stream handler as it is deployed on AWS Lambda behind a DynamoDB Streams event source
mapping (ReportBatchItemFailures, BisectBatchOnFunctionError), written with Powertools' batch
utility. tests/e2e/test_lambda_form_on_emulator.py runs this file unchanged on the fleet, as
``processing.processor: lambda:lambda_function.lambda_handler`` (the Lambda console's own names).

Orders whose status is ``poison`` can never be processed; an order with ``fail_times: N`` fails its
first N attempts. Each processed order is a line in ``$ORDERS_OUTPUT_DIR/processed.jsonl``, and each
invocation what it was given and answered in ``invocations.jsonl``.
"""

import json
import os
from pathlib import Path

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
    DynamoDBRecord,
    DynamoDBStreamEvent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
logger = Logger(service="orders")
OUTPUT = Path(os.environ["ORDERS_OUTPUT_DIR"])
attempts: dict[str, int] = {}


class OrderRejectedError(Exception):
    pass


def record_handler(record: DynamoDBRecord) -> None:
    order = record.dynamodb.new_image
    sequence_number = record.dynamodb.sequence_number
    if order.get("status") == "poison":
        raise OrderRejectedError(f"order {order['pk']} can never be processed")
    attempts[sequence_number] = attempts.get(sequence_number, 0) + 1
    if attempts[sequence_number] <= int(order.get("fail_times", 0)):
        raise OrderRejectedError(f"order {order['pk']} failed attempt {attempts[sequence_number]}")
    line = {"sequence_number": sequence_number, "pk": order["pk"], "event": record.event_name.name}
    with open(OUTPUT / "processed.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")


def note(invocation: dict) -> None:
    with open(OUTPUT / "invocations.jsonl", "a") as out:
        out.write(json.dumps(invocation) + "\n")


@logger.inject_lambda_context
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    stream_event = DynamoDBStreamEvent(event)
    records = list(stream_event.records)
    logger.info("processing orders", extra={"records": len(records)})
    invocation = {
        "request_id": context.aws_request_id,
        "function_name": context.function_name,
        "memory_limit_in_mb": context.memory_limit_in_mb,
        "remaining_millis": context.get_remaining_time_in_millis(),
        "event_source_arns": sorted({r.event_source_arn for r in records}),
        "sequence_numbers": [r.dynamodb.sequence_number for r in records],
    }
    try:
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    except Exception as error:
        note({**invocation, "raised": type(error).__name__})
        raise
    note({**invocation, "failures": [f["itemIdentifier"] for f in response["batchItemFailures"]]})
    return response

"""AWS Lambda's DynamoDB Streams event and context object, built from the records a worker holds.

A handler written for Lambda reads its event by Lambda's field names and types and its context by
the Python runtime's attribute names; this module makes both, so such a handler runs here unchanged
(the Lambda form, :mod:`consumer.processing.lambda_form`). What Lambda sends, from AWS's
documentation of DynamoDB Streams events, tumbling windows and the Python context object:

* the event is ``{"Records": [...]}``; each record is the stream record as DynamoDB Streams'
  GetRecords returns it — ``eventID``, ``eventName``, ``eventVersion``, ``eventSource``
  (``aws:dynamodb``), ``awsRegion``, ``dynamodb`` (``ApproximateCreationDateTime``, ``Keys``,
  ``NewImage``, ``OldImage``, ``SequenceNumber``, ``SizeBytes``, ``StreamViewType``; images in
  DynamoDB JSON) — plus ``eventSourceARN``, the stream's ARN;
* ``ApproximateCreationDateTime`` is a number of whole epoch seconds, which Lambda's Python runtime
  parses to a float (``1694530154.0``);
* a delete made by Time to Live carries ``userIdentity`` ``{"type": "Service", "principalId":
  "dynamodb.amazonaws.com"}`` — spelt so in Lambda's event, while botocore's model of GetRecords
  spells the members ``Type`` and ``PrincipalId``: both spellings are read, Lambda's is written;
* with a tumbling window the event also has ``window`` (``start`` and ``end`` as ISO 8601 UTC
  times to the second), ``state``, ``shardId``, ``eventSourceARN``, ``isFinalInvokeForWindow`` and
  ``isWindowTerminatedEarly``;
* the context has ``aws_request_id`` (new for every invocation), ``function_name``,
  ``function_version``, ``invoked_function_arn``, ``memory_limit_in_mb`` (a string: the runtime
  reads it from an environment variable), ``log_group_name``, ``log_stream_name``, ``identity``
  (an object whose Cognito fields are None), ``client_context`` and ``tenant_id`` (None for a stream
  invocation) and ``get_remaining_time_in_millis()`` (the time to the invocation's deadline, never
  below 0).

Every event is built afresh for its invocation: a handler that changes it changes nothing here.
"""

from __future__ import annotations

import copy
import math
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from consumer.processing.kinesis_event import execution_role_arn, kinesis_event
from consumer.records import StreamRecord, WireRecord
from consumer.records.kinesis_stream_record import KinesisStreamRecord
from ground.clock import Clock

# Lambda's order of a record's fields (as its events print), and of the ``dynamodb`` body's.
_RECORD_FIELDS = ("eventID", "eventName", "eventVersion", "eventSource", "awsRegion")
_BODY_FIELDS = (
    "ApproximateCreationDateTime",
    "Keys",
    "NewImage",
    "OldImage",
    "SequenceNumber",
    "SizeBytes",
    "StreamViewType",
)


def _own_copy(record: StreamRecord) -> dict[str, Any]:
    """The record's wire form as a dict nobody else holds (a WireRecord parses its bytes afresh)."""
    if isinstance(record, WireRecord):
        return dict(record.raw)
    return copy.deepcopy(dict(record.raw))


def lambda_record(record: StreamRecord, stream_arn: str) -> dict[str, Any]:
    """One record of Lambda's event: the wire record, ``eventSourceARN`` added, TTL's identity in
    Lambda's spelling, the creation time in whole seconds. A field the wire adds that Lambda's
    documentation does not list is passed on after the documented ones, not dropped."""
    raw = _own_copy(record)
    body = raw.pop("dynamodb", None)
    identity = raw.pop("userIdentity", None)
    event: dict[str, Any] = {name: raw.pop(name) for name in _RECORD_FIELDS if name in raw}
    if isinstance(body, dict):
        ordered = {name: body.pop(name) for name in _BODY_FIELDS if name in body}
        ordered.update(body)
        created = ordered.get("ApproximateCreationDateTime")
        if isinstance(created, int | float) and not isinstance(created, bool):
            ordered["ApproximateCreationDateTime"] = float(math.floor(created))
        event["dynamodb"] = ordered
    elif body is not None:
        event["dynamodb"] = body
    event["eventSourceARN"] = stream_arn
    if isinstance(identity, Mapping):
        event["userIdentity"] = {
            "type": identity.get("type", identity.get("Type")),
            "principalId": identity.get("principalId", identity.get("PrincipalId")),
        }
    event.update(raw)
    return event


def streams_event(
    records: Sequence[StreamRecord], stream_arn: str, function_name: str = ""
) -> dict[str, Any]:
    """Lambda's event for one batch of one shard's records, in stream order: the DynamoDB Streams
    event, or for a Kinesis data stream's records the Kinesis event
    (:mod:`consumer.processing.kinesis_event`; ``function_name`` names its ``invokeIdentityArn``)."""
    kinesis = [r.kinesis for r in records if isinstance(r, KinesisStreamRecord)]
    if kinesis and len(kinesis) == len(records):
        return kinesis_event(kinesis, stream_arn, execution_role_arn(stream_arn, function_name))
    return {"Records": [lambda_record(record, stream_arn) for record in records]}


def iso_second(epoch_seconds: float) -> str:
    """A window bound as Lambda writes it: ``2020-07-30T17:00:00Z``."""
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def window_event(
    records: Sequence[StreamRecord],
    stream_arn: str,
    *,
    shard_id: str,
    start: float,
    end: float,
    state: Mapping[str, Any],
    final: bool,
    function_name: str = "",
) -> dict[str, Any]:
    """Lambda's event with a tumbling window: the records (none on the final invocation), the
    window's bounds, the state so far and the flags. ``isWindowTerminatedEarly`` is always false
    here: a state over ``processing.max_window_state_bytes`` fails the batch instead of ending the
    window early (docs/migrating-from-lambda.md)."""
    event = streams_event(records, stream_arn, function_name)
    event.update(
        {
            "window": {"start": iso_second(start), "end": iso_second(end)},
            "state": copy.deepcopy(dict(state)),
            "shardId": shard_id,
            "eventSourceARN": stream_arn,
            "isFinalInvokeForWindow": final,
            "isWindowTerminatedEarly": False,
        }
    )
    return event


class CognitoIdentity:
    """``context.identity``: set by Lambda for calls from the AWS Mobile SDK only, so both are None."""

    __slots__ = ("cognito_identity_id", "cognito_identity_pool_id")

    def __init__(self) -> None:
        self.cognito_identity_id: str | None = None
        self.cognito_identity_pool_id: str | None = None

    def __repr__(self) -> str:
        return (
            f"CognitoIdentity([cognito_identity_id={self.cognito_identity_id},"
            f"cognito_identity_pool_id={self.cognito_identity_pool_id}])"
        )


class LambdaContext:
    """The context object of one invocation, with the attributes of Lambda's Python runtime.

    ``get_remaining_time_in_millis()`` counts down to the invocation's deadline (its start plus the
    configured timeout) on the worker's monotonic clock, so a wall-clock step does not move it.
    """

    def __init__(
        self,
        *,
        function_name: str,
        function_version: str,
        invoked_function_arn: str,
        memory_limit_in_mb: int,
        log_group_name: str,
        log_stream_name: str,
        timeout_millis: int,
        clock: Clock,
    ) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.function_name = function_name
        self.function_version = function_version
        self.invoked_function_arn = invoked_function_arn
        self.memory_limit_in_mb = str(memory_limit_in_mb)
        self.log_group_name = log_group_name
        self.log_stream_name = log_stream_name
        self.identity = CognitoIdentity()
        self.client_context: Any = None
        self.tenant_id: str | None = None
        self._clock = clock
        self.deadline_millis = clock.monotonic_millis() + timeout_millis

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.deadline_millis - self._clock.monotonic_millis())

    def __repr__(self) -> str:
        return (
            f"LambdaContext([aws_request_id={self.aws_request_id},log_group_name={self.log_group_name},"
            f"log_stream_name={self.log_stream_name},function_name={self.function_name},"
            f"memory_limit_in_mb={self.memory_limit_in_mb},function_version={self.function_version},"
            f"invoked_function_arn={self.invoked_function_arn},client_context={self.client_context},"
            f"identity={self.identity},tenant_id={self.tenant_id}])"
        )


def function_arn(stream_arn: str, function_name: str, version: str) -> str:
    """The function's ARN in the stream's partition, region and account (qualified unless
    ``$LATEST``), as ``context.invoked_function_arn`` names the function an event source mapping
    invokes."""
    parts = stream_arn.split(":", 5)
    partition, region, account = (parts[1], parts[3], parts[4]) if len(parts) == 6 else ("aws", "", "")
    arn = f"arn:{partition}:lambda:{region}:{account}:function:{function_name}"
    return arn if version == "$LATEST" else f"{arn}:{version}"

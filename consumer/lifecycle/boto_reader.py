"""A :class:`~consumer.lifecycle.ports.StreamReader` on the stock boto3 DynamoDB Streams client.

This is the straightforward path — botocore parses every response — and the reference the fast
parser in ``consumer/streams`` is measured against. It maps the service's errors onto the lifecycle's
(expired iterator, trimmed data, throttling, a shard or stream that is gone) and normalises records
to the wire form :class:`~consumer.records.StreamRecord` expects (binary as base64, the creation time
as epoch seconds), so a processor sees the same records whichever reader the worker uses.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.lifecycle.ports import (
    DataTrimmedError,
    Fetched,
    IteratorExpiredError,
    ReadThrottledError,
    ShardGoneError,
    StreamGoneError,
)
from consumer.records import StreamRecord

NAMED_POSITIONS = ("TRIM_HORIZON", "LATEST")
THROTTLING = ("LimitExceededException", "ProvisionedThroughputExceededException", "ThrottlingException")


def _wire_value(value: Mapping[str, Any]) -> dict[str, Any]:
    ((kind, raw),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(raw).decode()}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode() for b in raw]}
    if kind == "M":
        return {"M": {k: _wire_value(v) for k, v in raw.items()}}
    if kind == "L":
        return {"L": [_wire_value(v) for v in raw]}
    return {kind: raw}


def to_wire(record: Mapping[str, Any]) -> dict[str, Any]:
    """Undo botocore's parsing of one record: base64 binaries, epoch-seconds creation time."""
    body = dict(record["dynamodb"])
    created = body.get("ApproximateCreationDateTime")
    if isinstance(created, dt.datetime):
        body["ApproximateCreationDateTime"] = created.timestamp()
    for image in ("Keys", "NewImage", "OldImage"):
        if image in body:
            body[image] = {name: _wire_value(v) for name, v in body[image].items()}
    return {**record, "dynamodb": body}


class BotoStreamReader:
    def __init__(self, client: Any, stream_arn: str, clock_seconds: Any = time.time) -> None:
        self._client = client
        self.stream_arn = stream_arn
        self._now = clock_seconds

    @contextmanager
    def _errors(self, what: str, *, shard_scope: bool = False) -> Iterator[None]:
        try:
            yield
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            message = f"{what}: {code}: {exc.response.get('Error', {}).get('Message', '')}"
            if code == "ExpiredIteratorException":
                raise IteratorExpiredError(message) from exc
            if code == "TrimmedDataAccessException":
                raise DataTrimmedError(message) from exc
            if code in (
                "LimitExceededException",
                "ProvisionedThroughputExceededException",
                "ThrottlingException",
            ):
                raise ReadThrottledError(message) from exc
            if code == "ResourceNotFoundException":
                if shard_scope:
                    raise ShardGoneError(message) from exc
                raise StreamGoneError(f"{message} (was the table or its stream deleted?)") from exc
            if code in ("AccessDeniedException", "UnrecognizedClientException"):
                raise StreamGoneError(
                    f"{message}: grant dynamodb:GetShardIterator/GetRecords on the stream"
                ) from exc
            raise ReadThrottledError(message) from exc
        except BotoCoreError as exc:
            raise ReadThrottledError(f"{what}: {exc}") from exc

    def iterator_at(self, shard_id: str, position: str) -> str:
        request: dict[str, Any] = {"StreamArn": self.stream_arn, "ShardId": shard_id}
        if position in NAMED_POSITIONS:
            request["ShardIteratorType"] = position
        else:
            request["ShardIteratorType"] = "AFTER_SEQUENCE_NUMBER"
            request["SequenceNumber"] = position
        with self._errors(f"GetShardIterator on shard {shard_id}", shard_scope=True):
            iterator: str = self._client.get_shard_iterator(**request)["ShardIterator"]
        return iterator

    def fetch(self, shard_id: str, iterator: str, limit: int) -> Fetched:
        with self._errors(f"GetRecords on shard {shard_id}"):
            response = self._client.get_records(ShardIterator=iterator, Limit=limit)
        records = tuple(StreamRecord(to_wire(r), shard_id) for r in response.get("Records", []))
        behind = 0
        if records:
            behind = max(0, int((self._now() - records[-1].approximate_creation_time) * 1000))
        return Fetched(records, response.get("NextShardIterator"), behind)

    def list_shards(self) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = []
        request: dict[str, Any] = {"StreamArn": self.stream_arn}
        while True:
            with self._errors("DescribeStream"):
                description = self._client.describe_stream(**request)["StreamDescription"]
            shards.extend(description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                return shards
            request["ExclusiveStartShardId"] = last

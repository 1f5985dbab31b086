"""The fast record path: GetRecords response bytes → :class:`StreamRecord` with one orjson parse.

botocore's JSON parser walks the output shape for every attribute value of every record (and turns
binaries into bytes and creation times into datetimes), which costs about a dozen times the plain JSON
parse. Records are instead kept exactly as they arrived on the wire: the attribute-value encoding with
binaries still base64, the creation time as epoch seconds. :class:`StreamRecord` converts to Python
values lazily, with boto3's TypeDeserializer semantics, only when a processor asks.
"""

from __future__ import annotations

from typing import Any

import orjson

from consumer.records import StreamRecord
from consumer.streams.errors import StreamFormatError
from consumer.streams.source import GetRecordsResult


def _creation_millis(record: Any) -> int | None:
    body = record.get("dynamodb") if isinstance(record, dict) else None
    created = body.get("ApproximateCreationDateTime") if isinstance(body, dict) else None
    if isinstance(created, (int, float)):
        return int(created * 1000)
    return None


def parse_get_records(body: bytes, shard_id: str, now_wall_millis: int) -> GetRecordsResult:
    """Parse one GetRecords response body.

    ``millis_behind_latest`` is ``now − ApproximateCreationDateTime`` of the newest record delivered
    (DynamoDB Streams has no MillisBehindLatest of its own), 0 for an empty batch.
    """
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise StreamFormatError(
            f"GetRecords on shard {shard_id} returned a body that is not JSON ({len(body)} bytes, "
            f"starting {body[:60]!r}); is endpoint_url pointing at DynamoDB Streams?"
        ) from exc
    if not isinstance(document, dict):
        raise StreamFormatError(
            f"GetRecords on shard {shard_id} returned {type(document).__name__}, not an object"
        )
    wire_records = document.get("Records") or []
    if not isinstance(wire_records, list) or not all(isinstance(r, dict) for r in wire_records):
        raise StreamFormatError(
            f"GetRecords on shard {shard_id} returned Records that are not a list of objects"
        )
    records = tuple([StreamRecord(r, shard_id) for r in wire_records])
    next_iterator = document.get("NextShardIterator")
    if next_iterator is not None and not isinstance(next_iterator, str):
        raise StreamFormatError(
            f"GetRecords on shard {shard_id} returned NextShardIterator {next_iterator!r}"
        )
    behind = 0
    if wire_records:
        created = _creation_millis(wire_records[-1])
        if created is not None:
            behind = max(0, now_wall_millis - created)
    return GetRecordsResult(records, next_iterator, behind)

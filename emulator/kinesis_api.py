"""The Kinesis JSON 1.1 protocol: request body in, (status, AWS-shaped body, latency) out.

Requests are checked the way the service checks them (types, ranges, the parameters each iterator
type or shard filter needs, StreamName/StreamARN/NextToken combinations), and every failure,
including a body that is not JSON or an operation the emulator does not serve, becomes the error
document botocore parses (``__type`` + ``message``), so a client gets the exception class it gets
from AWS and the server never answers with a traceback.

ListShards pages with a ``NextToken`` that carries the stream, the filter and the last shard listed,
and expires after 300 seconds (``ExpiredNextTokenException``), as on AWS.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from emulator.errors import StreamsApiError, request_params
from emulator.kinesis_engine import MAX_GET_RECORDS, KinesisEngine, invalid
from emulator.kinesis_listing import describe_stream, list_shards, list_streams, summary
from emulator.kinesis_params import NAME, integer, stream_name, text, timestamp_ms
from emulator.kinesis_shards import HASH_SPACE, hash_key_of

ERROR_NAMESPACE = ""  # Kinesis answers a bare code: {"__type": "ResourceNotFoundException"}
MAX_DATA_BYTES = 1024 * 1024
MAX_PUT_RECORDS = 500
MAX_PUT_RECORDS_BYTES = 5 * 1024 * 1024
MAX_SHARDS_AT_CREATE = 500
ITERATOR_TYPES = ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER", "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
_DIGITS = re.compile(r"^(0|[1-9]\d{0,128})$")
_REGION = re.compile(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/")


def region_of(authorization: str) -> str:
    """The region a SigV4 request was signed for (the emulator's ARNs name it)."""
    match = _REGION.search(authorization)
    return match.group(1) if match else "us-east-1"


def _sequence(params: dict[str, Any], name: str) -> int:
    value = text(params, name)
    if value is None or not _DIGITS.match(value):
        raise invalid(f"{name} must be a sequence number (digits), got {value!r}")
    return int(value)


def _data(value: object) -> bytes:
    if not isinstance(value, str):
        raise invalid("Data must be a base64 string")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise StreamsApiError("SerializationException", f"Data is not base64: {exc}") from exc
    if len(data) > MAX_DATA_BYTES:
        raise StreamsApiError(
            "ValidationException",
            f"1 validation error detected: Value at 'data' failed to satisfy constraint: Member must have "
            f"length less than or equal to {MAX_DATA_BYTES}",
        )
    return data


def _entry(entry: object) -> tuple[bytes, str, int]:
    if not isinstance(entry, dict):
        raise invalid("each record must be an object")
    data = _data(entry.get("Data"))
    key = entry.get("PartitionKey")
    if not isinstance(key, str) or not 1 <= len(key) <= 256:
        raise invalid("PartitionKey must be 1 to 256 characters")
    explicit = entry.get("ExplicitHashKey")
    if explicit is None:
        return data, key, hash_key_of(key)
    if not isinstance(explicit, str) or not _DIGITS.match(explicit) or int(explicit) >= HASH_SPACE:
        raise invalid(f"ExplicitHashKey {explicit!r} must be a decimal integer below 2^128")
    return data, key, int(explicit)


# ------------------------------------------------------------------------------- dispatch


def _create(engine: KinesisEngine, params: dict[str, Any], region: str) -> dict[str, Any]:
    name = text(params, "StreamName", required=True)
    assert name is not None
    if not NAME.match(name):
        raise invalid(f"StreamName {name!r} must match [a-zA-Z0-9_.-]+ (1..128 characters)")
    details = params.get("StreamModeDetails") or {"StreamMode": "PROVISIONED"}
    mode = details.get("StreamMode") if isinstance(details, dict) else None
    if mode not in ("PROVISIONED", "ON_DEMAND"):
        raise invalid("StreamModeDetails.StreamMode must be PROVISIONED or ON_DEMAND")
    count = integer(params, "ShardCount", 1, MAX_SHARDS_AT_CREATE)
    engine.create_stream(name, count, mode, region)
    return {}


def _iterator(engine: KinesisEngine, params: dict[str, Any]) -> dict[str, Any]:
    name, arn = stream_name(params)
    shard_id = text(params, "ShardId", required=True)
    kind = params.get("ShardIteratorType")
    if kind not in ITERATOR_TYPES:
        raise invalid(
            f"1 validation error detected: Value '{kind}' at 'shardIteratorType' failed to satisfy constraint: "
            f"Member must satisfy enum value set: [{', '.join(ITERATOR_TYPES)}]"
        )
    sequence = timestamp = None
    if kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
        if params.get("StartingSequenceNumber") is None:
            raise invalid(
                "Must either specify (1) AT_SEQUENCE_NUMBER or AFTER_SEQUENCE_NUMBER and StartingSequenceNumber "
                f"or (2) TRIM_HORIZON or LATEST and no StartingSequenceNumber. Request specified {kind} and no "
                "StartingSequenceNumber."
            )
        sequence = _sequence(params, "StartingSequenceNumber")
    elif params.get("StartingSequenceNumber") is not None:
        raise invalid(
            f"StartingSequenceNumber is only for AT_SEQUENCE_NUMBER or AFTER_SEQUENCE_NUMBER, not {kind}"
        )
    if kind == "AT_TIMESTAMP":
        timestamp = timestamp_ms(params, "Timestamp")
    assert shard_id is not None
    stream = engine.stream(name, arn)
    return {"ShardIterator": engine.get_shard_iterator(stream, shard_id, kind, sequence, timestamp)}


def _put_records(engine: KinesisEngine, params: dict[str, Any]) -> dict[str, Any]:
    name, arn = stream_name(params)
    entries = params.get("Records")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_PUT_RECORDS:
        raise invalid(f"Records must hold 1 to {MAX_PUT_RECORDS} records")
    parsed = [_entry(e) for e in entries]
    total = sum(len(data) + len(key.encode()) for data, key, _ in parsed)
    if total > MAX_PUT_RECORDS_BYTES:
        raise invalid(
            f"Records total {total} bytes, over the {MAX_PUT_RECORDS_BYTES}-byte limit of a request"
        )
    results = engine.put_records(name, arn, parsed)
    failed = sum(1 for r in results if "ErrorCode" in r)
    return {"FailedRecordCount": failed, "Records": results, "EncryptionType": "NONE"}


def _put_record(engine: KinesisEngine, params: dict[str, Any]) -> dict[str, Any]:
    name, arn = stream_name(params)
    (result,) = engine.put_records(name, arn, [_entry(params)])
    if "ErrorCode" in result:
        raise StreamsApiError(result["ErrorCode"], result["ErrorMessage"])
    return {**result, "EncryptionType": "NONE"}


def dispatch(
    engine: KinesisEngine, operation: str, params: dict[str, Any], region: str, now_ms: int
) -> dict[str, Any]:
    if operation == "GetRecords":
        token = text(params, "ShardIterator", required=True)
        assert token is not None
        return engine.get_records(
            token, integer(params, "Limit", 1, MAX_GET_RECORDS, MAX_GET_RECORDS) or MAX_GET_RECORDS
        )
    if operation == "GetShardIterator":
        return _iterator(engine, params)
    if operation == "ListShards":
        return list_shards(engine, params, now_ms)
    if operation == "PutRecord":
        return _put_record(engine, params)
    if operation == "PutRecords":
        return _put_records(engine, params)
    if operation == "DescribeStreamSummary":
        return summary(engine, engine.stream(*stream_name(params)))
    if operation == "DescribeStream":
        return describe_stream(engine, params)
    if operation == "CreateStream":
        return _create(engine, params, region)
    if operation == "DeleteStream":
        engine.delete_stream(*stream_name(params))
        return {}
    if operation == "ListStreams":
        limit = integer(params, "Limit", 1, 10_000, 100) or 100
        return list_streams(engine, limit, text(params, "ExclusiveStartStreamName"))
    if operation == "SplitShard":
        shard = text(params, "ShardToSplit", required=True)
        assert shard is not None
        engine.split_shard(*stream_name(params), shard, _sequence(params, "NewStartingHashKey"))
        return {}
    if operation == "MergeShards":
        first, second = (
            text(params, "ShardToMerge", required=True),
            text(params, "AdjacentShardToMerge", required=True),
        )
        assert first is not None and second is not None
        engine.merge_shards(*stream_name(params), first, second)
        return {}
    if operation == "UpdateShardCount":
        if params.get("ScalingType") != "UNIFORM_SCALING":
            raise invalid("ScalingType must be UNIFORM_SCALING")
        target = integer(params, "TargetShardCount", 1, 10_000)
        if target is None:
            raise invalid("TargetShardCount is required")
        return engine.update_shard_count(*stream_name(params), target)
    if operation in ("IncreaseStreamRetentionPeriod", "DecreaseStreamRetentionPeriod"):
        hours = integer(params, "RetentionPeriodHours", 1, 100_000)
        if hours is None:
            raise invalid("RetentionPeriodHours is required")
        engine.set_retention(*stream_name(params), hours, operation.startswith("Increase"))
        return {}
    raise StreamsApiError(
        "UnknownOperationException",
        f"The emulator's Kinesis does not serve {operation}; it serves {', '.join(OPERATIONS)}",
    )


OPERATIONS = (
    "CreateStream",
    "DeleteStream",
    "DescribeStream",
    "DescribeStreamSummary",
    "ListStreams",
    "ListShards",
    "GetShardIterator",
    "GetRecords",
    "PutRecord",
    "PutRecords",
    "SplitShard",
    "MergeShards",
    "UpdateShardCount",
    "IncreaseStreamRetentionPeriod",
    "DecreaseStreamRetentionPeriod",
)


def handle_kinesis_call(
    engine: KinesisEngine, operation: str, body: bytes, region: str, now_ms: int
) -> tuple[int, dict[str, Any], int]:
    latency = 0
    try:
        params = request_params(body)
        if operation not in OPERATIONS:
            raise StreamsApiError(
                "UnknownOperationException",
                f"The emulator's Kinesis does not serve {operation}; it serves {', '.join(OPERATIONS)}",
            )
        latency = engine.maybe_fail(operation)
        return 200, dispatch(engine, operation, params, region, now_ms), latency
    except StreamsApiError as exc:
        return exc.status, {"__type": ERROR_NAMESPACE + exc.code, "message": exc.message}, latency
    except Exception as exc:  # a bug must still answer AWS-shaped, never drop the connection
        message = f"Internal error in the emulator: {type(exc).__name__}: {exc}"
        return 500, {"__type": ERROR_NAMESPACE + "InternalFailure", "message": message}, latency

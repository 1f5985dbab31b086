"""The DynamoDB Streams JSON protocol: request body in, (status, AWS-shaped body, latency) out.

Every failure, including a body that is not JSON or an operation that does not exist, becomes the
error document botocore parses (``__type`` + ``message``), so a client gets the same exception
class it gets from AWS and the server never answers with a traceback.
"""

from __future__ import annotations

from typing import Any

from emulator.engine import MAX_DESCRIBE_LIMIT, StreamEngine
from emulator.errors import StreamsApiError, request_params, validation
from emulator.moto_bridge import MotoBridge

ERROR_NAMESPACE = "com.amazonaws.dynamodb.v20120810#"
OPERATIONS = ("ListStreams", "DescribeStream", "GetShardIterator", "GetRecords")


def _limit(params: dict[str, Any], maximum: int) -> int:
    value = params.get("Limit", maximum)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise validation(
            f"1 validation error detected: Value '{value}' at 'limit' failed to satisfy constraint: "
            f"Member must have value between 1 and {maximum}"
        )
    return value


def _optional_str(params: dict[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is not None and not isinstance(value, str):
        raise validation(f"{name} must be a string")
    return value


def _child_filter(params: dict[str, Any]) -> str | None:
    shard_filter = params.get("ShardFilter")
    if shard_filter is None:
        return None
    if not isinstance(shard_filter, dict) or shard_filter.get("Type") != "CHILD_SHARDS":
        raise validation("ShardFilter.Type must be CHILD_SHARDS")
    shard_id = shard_filter.get("ShardId")
    if not isinstance(shard_id, str) or not shard_id:
        raise validation("ShardFilter.ShardId is required with CHILD_SHARDS")
    return shard_id


def dispatch(
    engine: StreamEngine, bridge: MotoBridge, operation: str, params: dict[str, Any]
) -> dict[str, Any]:
    if operation in ("ListStreams", "DescribeStream"):
        bridge.sync()
    if operation == "ListStreams":
        return engine.list_streams(
            _optional_str(params, "TableName"),
            _limit(params, MAX_DESCRIBE_LIMIT),
            _optional_str(params, "ExclusiveStartStreamArn"),
        )
    if operation == "DescribeStream":
        return engine.describe_stream(
            params.get("StreamArn"),
            _limit(params, MAX_DESCRIBE_LIMIT),
            _optional_str(params, "ExclusiveStartShardId"),
            _child_filter(params),
        )
    if operation == "GetShardIterator":
        if not engine.has_stream(str(params.get("StreamArn"))):
            bridge.sync()
        token = engine.get_shard_iterator(
            params.get("StreamArn"),
            params.get("ShardId"),
            params.get("ShardIteratorType"),
            params.get("SequenceNumber"),
        )
        return {"ShardIterator": token}
    if operation == "GetRecords":
        return engine.get_records(params.get("ShardIterator"), params.get("Limit"))
    raise StreamsApiError(
        "UnknownOperationException", f"Unknown operation {operation}; known: {', '.join(OPERATIONS)}"
    )


def handle_streams_call(
    engine: StreamEngine, bridge: MotoBridge, operation: str, body: bytes
) -> tuple[int, dict[str, Any], int]:
    latency = 0
    try:
        params = request_params(body)
        if operation not in OPERATIONS:
            raise StreamsApiError(
                "UnknownOperationException", f"Unknown operation {operation}; known: {', '.join(OPERATIONS)}"
            )
        throttle_key = engine.throttle_key(params.get("ShardIterator")) if operation == "GetRecords" else None
        latency = engine.gate.admit(operation, throttle_key)
        return 200, dispatch(engine, bridge, operation, params), latency
    except StreamsApiError as exc:
        return exc.status, {"__type": ERROR_NAMESPACE + exc.code, "message": exc.message}, latency
    except Exception as exc:  # a bug must still answer AWS-shaped, never drop the connection
        message = f"Internal error in the emulator: {type(exc).__name__}: {exc}"
        return 500, {"__type": ERROR_NAMESPACE + "InternalServerError", "message": message}, latency

"""Listing a Kinesis stream: ListShards (filters, paging, NextToken), the legacy DescribeStream, and
the summary documents (DescribeStreamSummary, ListStreams, the control API's shard table).

ListShards pages with a ``NextToken`` that carries the stream, the filter and the last shard listed,
and expires after 300 seconds (``ExpiredNextTokenException``), as on AWS. Shards are listed in
creation order (parents before children); expired shards are not listed.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from emulator.errors import StreamsApiError
from emulator.kinesis_engine import KinesisEngine, KinesisStream, invalid
from emulator.kinesis_params import integer, stream_name, text, timestamp_ms
from emulator.kinesis_shards import KinesisShard

NEXT_TOKEN_TTL_MS = 300_000
MAX_LIST_SHARDS_PAGE = 1000
SHARD_FILTERS = (
    "AFTER_SHARD_ID",
    "AT_TRIM_HORIZON",
    "FROM_TRIM_HORIZON",
    "AT_LATEST",
    "AT_TIMESTAMP",
    "FROM_TIMESTAMP",
)


def _filter(params: dict[str, Any]) -> dict[str, Any]:
    shard_filter = params.get("ShardFilter")
    if shard_filter is None:
        return {"Type": "FROM_TRIM_HORIZON"}
    if not isinstance(shard_filter, dict) or shard_filter.get("Type") not in SHARD_FILTERS:
        raise invalid(f"ShardFilter.Type must be one of {', '.join(SHARD_FILTERS)}")
    kind = shard_filter["Type"]
    chosen: dict[str, Any] = {"Type": kind}
    if kind == "AFTER_SHARD_ID":
        chosen["ShardId"] = text(shard_filter, "ShardId", required=True)
    if kind in ("AT_TIMESTAMP", "FROM_TIMESTAMP"):
        chosen["Timestamp"] = timestamp_ms(shard_filter, "Timestamp")
    return chosen


def _keeps(
    chosen: dict[str, Any], stream: KinesisStream, engine: KinesisEngine
) -> Callable[[KinesisShard], bool]:
    kind = chosen["Type"]
    if kind == "AT_LATEST":
        return lambda s: s.is_open
    if kind == "AFTER_SHARD_ID":
        after = str(chosen["ShardId"])
        return lambda s: s.shard_id > after
    if kind == "FROM_TRIM_HORIZON":
        return lambda s: True
    if kind == "FROM_TIMESTAMP":
        at = int(chosen["Timestamp"])
        return lambda s: s.is_open or (s.closed_wall_ms or 0) >= at
    # AT_TRIM_HORIZON / AT_TIMESTAMP: the shards open at that moment (never before the stream began).
    moment = engine.horizon_wall_ms(stream) if kind == "AT_TRIM_HORIZON" else int(chosen["Timestamp"])
    moment = max(moment, stream.created_wall_ms)
    return lambda s: s.created_wall_ms <= moment and (s.is_open or (s.closed_wall_ms or 0) > moment)


def _token(state: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(state, separators=(",", ":")).encode()).decode()


def _untoken(token: str, now_ms: int) -> dict[str, Any]:
    try:
        state = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not isinstance(state, dict) or not {"arn", "after", "filter", "issued"} <= set(state):
            raise ValueError(state)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise invalid(f"NextToken {token[:40]!r} was not issued by ListShards on this endpoint") from exc
    if now_ms - int(state["issued"]) > NEXT_TOKEN_TTL_MS:
        raise StreamsApiError(
            "ExpiredNextTokenException",
            f"NextToken has expired ({NEXT_TOKEN_TTL_MS // 1000} s after it was issued)",
        )
    return state


def shard_document(shard: KinesisShard) -> dict[str, Any]:
    numbers = {"StartingSequenceNumber": str(shard.start_seq)}
    if shard.end_seq is not None:
        numbers["EndingSequenceNumber"] = str(shard.end_seq)
    document: dict[str, Any] = {
        "ShardId": shard.shard_id,
        "HashKeyRange": {"StartingHashKey": str(shard.low), "EndingHashKey": str(shard.high)},
        "SequenceNumberRange": numbers,
    }
    if shard.parent_id is not None:
        document["ParentShardId"] = shard.parent_id
    if shard.adjacent_parent_id is not None:
        document["AdjacentParentShardId"] = shard.adjacent_parent_id
    return document


def list_shards(engine: KinesisEngine, params: dict[str, Any], now_ms: int) -> dict[str, Any]:
    token = text(params, "NextToken")
    page = min(
        integer(params, "MaxResults", 1, 10_000, MAX_LIST_SHARDS_PAGE) or MAX_LIST_SHARDS_PAGE,
        MAX_LIST_SHARDS_PAGE,
    )
    if token is not None:
        if params.get("StreamName") is not None or params.get("ExclusiveStartShardId") is not None:
            raise invalid("NextToken cannot be used with StreamName or ExclusiveStartShardId")
        state = _untoken(token, now_ms)
        stream = engine.stream(None, str(state["arn"]))
        chosen, after = dict(state["filter"]), str(state["after"])
    else:
        name, arn = stream_name(params)
        stream = engine.stream(name, arn)
        chosen, after = _filter(params), text(params, "ExclusiveStartShardId") or ""
    engine.admit_list_shards(stream)
    keep = _keeps(chosen, stream, engine)
    shards = engine.list_shards(stream, lambda s: s.shard_id > after and keep(s))
    result: dict[str, Any] = {"Shards": [shard_document(s) for s in shards[:page]]}
    if len(shards) > page:
        result["NextToken"] = _token(
            {"arn": stream.arn, "after": shards[page - 1].shard_id, "filter": chosen, "issued": now_ms}
        )
    return result


def describe_stream(engine: KinesisEngine, params: dict[str, Any]) -> dict[str, Any]:
    """The legacy DescribeStream (KCL 1, the CLI): a summary and up to ``Limit`` shards a page."""
    name, arn = stream_name(params)
    stream = engine.stream(name, arn)
    limit = integer(params, "Limit", 1, 10_000, 100) or 100
    after = text(params, "ExclusiveStartShardId") or ""
    shards = engine.list_shards(stream, lambda s: s.shard_id > after)
    described = summary(engine, stream)["StreamDescriptionSummary"]
    description = {
        key: described[key]
        for key in (
            "StreamName",
            "StreamARN",
            "StreamStatus",
            "StreamModeDetails",
            "RetentionPeriodHours",
            "StreamCreationTimestamp",
            "EnhancedMonitoring",
            "EncryptionType",
        )
    }
    description["Shards"] = [shard_document(s) for s in shards[:limit]]
    description["HasMoreShards"] = len(shards) > limit
    return {"StreamDescription": description}


def summary(engine: KinesisEngine, stream: KinesisStream) -> dict[str, Any]:
    return {
        "StreamDescriptionSummary": {
            "StreamName": stream.name,
            "StreamARN": stream.arn,
            "StreamStatus": "ACTIVE",
            "StreamModeDetails": {"StreamMode": stream.mode},
            "RetentionPeriodHours": stream.retention_hours,
            "StreamCreationTimestamp": stream.created_wall_ms / 1000,
            "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
            "EncryptionType": "NONE",
            "OpenShardCount": engine.open_count(stream),
            "ConsumerCount": 0,
        }
    }


def list_streams(engine: KinesisEngine, limit: int, exclusive_start: str | None) -> dict[str, Any]:
    streams = [s for s in engine.streams() if exclusive_start is None or s.name > exclusive_start]
    page = streams[:limit]
    return {
        "StreamNames": [s.name for s in page],
        "HasMoreStreams": len(streams) > limit,
        "StreamSummaries": [
            {
                "StreamName": s.name,
                "StreamARN": s.arn,
                "StreamStatus": "ACTIVE",
                "StreamModeDetails": {"StreamMode": s.mode},
                "StreamCreationTimestamp": s.created_wall_ms / 1000,
            }
            for s in page
        ],
    }


def shard_table(engine: KinesisEngine, name: str | None) -> list[dict[str, Any]]:
    """The true state of every shard, expired ones included, for tests and demos (control API)."""
    return [
        {
            "stream": stream.name,
            "streamArn": stream.arn,
            "shardId": shard.shard_id,
            "parentShardIds": list(shard.parents),
            "childShardIds": list(shard.children),
            "open": shard.is_open,
            "expired": not live,
            "startingHashKey": str(shard.low),
            "endingHashKey": str(shard.high),
            "records": len(shard.seqs),
            "startingSequenceNumber": str(shard.start_seq),
            "endingSequenceNumber": None if shard.end_seq is None else str(shard.end_seq),
        }
        for stream, shard, live in engine.shards_of(name)
    ]

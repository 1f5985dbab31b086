"""The lease key of a shard when one leases table serves several streams, and how it splits.

One leases table serves every stream of an application that lists several (``streams:`` in the
settings). A single-stream application keeps the plain shard id as its lease key, as the Java KCL
writes it, so its table stays KCL-compatible. With ``streams:``, every key is namespaced::

    <account>:<table name>:<stream creation epoch seconds>:<shard id>
    123456789012:orders:1764214740:shardId-00000001764214740000-1a2b3c4d

KCL 3's multi-stream form (``account:streamName:creationEpoch:shardId``), with DynamoDB's table
name for the stream name and the epoch read from the stream's label (its creation time, in the
stream ARN). No part but the account and the label's time can hold a colon, and neither does:
the key splits unambiguously, and a table deleted and re-created gets a new stream, a new label,
and so keys that no lease of the old stream can be mistaken for.

A Kinesis data stream's keys are the Java KCL's own (the shard id, or
``<account>:<stream name>:<creation epoch seconds>:<shard id>``): see the end of this module.

On consumer's lowest floor, below every room that reads lease keys: the stream adapter writes them
(consumer/streams), the metrics read the table back out of them (consumer/telemetry) and the runtime
splits them per stream.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_STREAM_ARN = re.compile(
    r"^arn:[^:]+:dynamodb:[^:]*:(?P<account>[^:]*):table/(?P<table>[^/]+)/stream/(?P<label>.+)$"
)


def stream_prefix(stream_arn: str) -> str:
    """``<account>:<table>:<creation epoch seconds>:``, the namespace of one stream's lease keys.

    Raises ValueError for an ARN that is not a DynamoDB stream's (the worker resolved it itself
    from DescribeTable, so that is a bug, not a setting)."""
    match = _STREAM_ARN.match(stream_arn)
    if match is None:
        raise ValueError(f"{stream_arn!r} is not a DynamoDB stream ARN (arn:...:table/NAME/stream/LABEL)")
    label = match["label"]
    try:
        created = datetime.fromisoformat(label)
    except ValueError:
        epoch = re.sub(r"\D", "", label) or "0"  # not a time: its digits still tell streams apart
    else:
        epoch = str(int((created if created.tzinfo else created.replace(tzinfo=UTC)).timestamp()))
    return f"{match['account'] or '000000000000'}:{match['table']}:{epoch}:"


def split_lease_key(lease_key: str) -> tuple[str, str]:
    """(namespace, shard id) of a namespaced key; ("", key) for a plain one (a single stream's)."""
    namespace, colon, shard_id = lease_key.rpartition(":")
    return (namespace + colon, shard_id) if colon else ("", lease_key)


def table_of(lease_key: str) -> str | None:
    """The table a namespaced lease key belongs to; None for a plain key (the one table's)."""
    namespace, _ = split_lease_key(lease_key)
    parts = namespace.split(":")
    return parts[1] if len(parts) >= 4 else None


# ------------------------------------------------------------------------------ Kinesis
#
# The Java KCL's lease keys for Kinesis data streams. A single-stream application's key is the shard
# id. A multi-stream application's key is its *stream identifier* and the shard id joined by a colon,
#
#     <account id>:<stream name>:<creation epoch seconds>:<shard id>
#     123456789012:orders:1764214740:shardId-000000000001
#
# the identifier being the account of the stream's ARN, its name and its DescribeStreamSummary
# StreamCreationTimestamp in whole seconds (digits, above 0). KCL's multi-stream items also carry the
# identifier as ``streamName`` (S) and the shard id as ``shardId`` (S).

_KINESIS_ARN = re.compile(
    r"^arn:aws[^:]*:kinesis:(?P<region>[-a-z0-9]+):(?P<account>[0-9]{12}):stream/(?P<name>[^:/]+)$"
)
_KCL_STREAM_IDENTIFIER = re.compile(r"^(?P<account>[0-9]+):(?P<name>[^:]+):(?P<epoch>[0-9]+)$")


def kinesis_stream_identifier(stream_arn: str, created_epoch_seconds: int) -> str:
    """KCL's multi-stream identifier ``<account>:<stream name>:<creation epoch seconds>`` of a stream.

    Raises ValueError for an ARN that is not a Kinesis data stream's, or an epoch that is not above 0
    (KCL refuses both)."""
    match = _KINESIS_ARN.match(stream_arn)
    if match is None:
        raise ValueError(
            f"{stream_arn!r} is not a Kinesis stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME)"
        )
    if created_epoch_seconds <= 0:
        raise ValueError(f"a stream's creation epoch must be above 0 seconds, got {created_epoch_seconds}")
    return f"{match['account']}:{match['name']}:{created_epoch_seconds}"


def kinesis_lease_key(shard_id: str, stream_identifier: str | None = None) -> str:
    """The lease key of a shard: the shard id alone (single stream) or ``<identifier>:<shard id>``."""
    if ":" in shard_id:
        raise ValueError(f"shard id {shard_id!r} holds a colon: no Kinesis shard id does")
    if stream_identifier is None:
        return shard_id
    if _KCL_STREAM_IDENTIFIER.match(stream_identifier) is None:
        raise ValueError(f"{stream_identifier!r} is not a KCL stream identifier (<account>:<stream>:<epoch>)")
    return f"{stream_identifier}:{shard_id}"


def parse_kinesis_lease_key(lease_key: str) -> tuple[str | None, str]:
    """(stream identifier, shard id) of a Kinesis lease key as the Java KCL writes it; the identifier
    is None for a single stream's key. A key with a colon that is not KCL's multi-stream form raises
    ValueError naming it (KCL could not deserialize its stream identifier either)."""
    identifier, colon, shard_id = lease_key.rpartition(":")
    if not colon:
        return None, lease_key
    match = _KCL_STREAM_IDENTIFIER.match(identifier)
    if match is None or not shard_id or int(match["epoch"]) <= 0:
        raise ValueError(
            f"lease key {lease_key!r} is neither a shard id nor <account>:<stream>:<epoch>:<shard id> "
            "(the Java KCL's multi-stream form)"
        )
    return identifier, shard_id


def kcl_multi_stream_attributes(lease_key: str) -> dict[str, dict[str, str]]:
    """The attributes KCL's multi-stream lease items carry beside the key: ``streamName`` (the stream
    identifier, the key's namespace without its last colon) and ``shardId``; none for a single
    stream's key. Both sources' namespaced keys are KCL's multi-stream form, so a Java KCL reading the
    table finds every lease's stream and shard where it looks for them."""
    namespace, shard_id = split_lease_key(lease_key)
    if not namespace:
        return {}
    return {"streamName": {"S": namespace[:-1]}, "shardId": {"S": shard_id}}

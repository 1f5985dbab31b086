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

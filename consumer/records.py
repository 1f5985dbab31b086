"""Stream records as the processor sees them.

A :class:`StreamRecord` wraps one record exactly as DynamoDB Streams sent it on the wire (the
attribute-value encoding, binary still base64) and converts images to Python values only when a
processor asks for them. Sinks that land the wire form (the change log) never pay for conversion,
which is most of what keeps the per-record cost near a plain JSON parse.

Python values follow boto3's ``TypeDeserializer``: ``N`` → ``Decimal``, ``B`` → ``bytes``,
``SS``/``NS``/``BS`` → ``set``, ``M`` → ``dict``, ``L`` → ``list``, ``NULL`` → ``None``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Context, Decimal
from functools import cached_property
from typing import Any, Literal

EventName = Literal["INSERT", "MODIFY", "REMOVE"]

# boto3's TypeDeserializer uses this context (38 digits, DynamoDB's number precision).
_DYNAMODB_CONTEXT = Context(Emin=-128, Emax=126, prec=38)


class RecordFormatError(ValueError):
    """A stream record that does not have the shape DynamoDB Streams documents."""


def _decimal(text: str) -> Decimal:
    return _DYNAMODB_CONTEXT.create_decimal(text)


def deserialize_value(value: Mapping[str, Any]) -> Any:
    """One attribute value (``{"S": "x"}``) from its wire form to a Python value."""
    if len(value) != 1:
        raise RecordFormatError(f"an attribute value has exactly one type key, got {sorted(value)}")
    ((kind, raw),) = value.items()
    if kind == "S":
        return raw
    if kind == "N":
        return _decimal(raw)
    if kind == "BOOL":
        return bool(raw)
    if kind == "M":
        return {k: deserialize_value(v) for k, v in raw.items()}
    if kind == "L":
        return [deserialize_value(v) for v in raw]
    if kind == "NULL":
        return None
    if kind == "B":
        return raw if isinstance(raw, bytes) else base64.b64decode(raw)
    if kind == "SS":
        return set(raw)
    if kind == "NS":
        return {_decimal(n) for n in raw}
    if kind == "BS":
        return {b if isinstance(b, bytes) else base64.b64decode(b) for b in raw}
    raise RecordFormatError(f"unknown attribute type {kind!r}")


def deserialize_item(item: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {name: deserialize_value(value) for name, value in item.items()}


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """The shard a batch came from, with its lineage."""

    shard_id: str
    parent_shard_ids: tuple[str, ...] = ()


class StreamRecord:
    """One change of one item. ``raw`` is the record as sent on the wire."""

    __slots__ = ("__dict__", "raw", "shard_id")

    def __init__(self, raw: Mapping[str, Any], shard_id: str) -> None:
        self.raw = raw
        self.shard_id = shard_id

    @property
    def _dynamodb(self) -> Mapping[str, Any]:
        try:
            body: Mapping[str, Any] = self.raw["dynamodb"]
        except KeyError:
            raise RecordFormatError(f"record {self.raw.get('eventID')!r} has no 'dynamodb' body") from None
        return body

    @property
    def event_id(self) -> str:
        return str(self.raw.get("eventID", ""))

    @property
    def event_name(self) -> EventName:
        name = self.raw.get("eventName")
        if name not in ("INSERT", "MODIFY", "REMOVE"):
            raise RecordFormatError(f"record {self.event_id!r} has eventName {name!r}")
        return name  # type: ignore[no-any-return]

    @property
    def sequence_number(self) -> str:
        seq = self._dynamodb.get("SequenceNumber")
        if not isinstance(seq, str) or not seq.isdigit():
            raise RecordFormatError(f"record {self.event_id!r} has SequenceNumber {seq!r}")
        return seq

    @property
    def approximate_creation_time(self) -> float:
        """Epoch seconds (DynamoDB Streams sends a number; boto3 turns it into a datetime)."""
        return float(self._dynamodb.get("ApproximateCreationDateTime", 0.0))

    @property
    def size_bytes(self) -> int:
        return int(self._dynamodb.get("SizeBytes", 0))

    @property
    def stream_view_type(self) -> str | None:
        view = self._dynamodb.get("StreamViewType")
        return None if view is None else str(view)

    @property
    def user_identity(self) -> Mapping[str, Any] | None:
        """Set for deletes made by TTL: ``{"type": "Service", "principalId": "dynamodb.amazonaws.com"}``."""
        identity = self.raw.get("userIdentity")
        return identity if isinstance(identity, Mapping) else None

    @property
    def is_ttl_delete(self) -> bool:
        identity = self.user_identity
        if identity is None:
            return False
        # Lambda events and the docs spell it principalId; botocore's model spells it PrincipalId.
        principal = identity.get("principalId", identity.get("PrincipalId"))
        return bool(principal == "dynamodb.amazonaws.com")

    @cached_property
    def keys(self) -> dict[str, Any]:
        return deserialize_item(self._dynamodb.get("Keys")) or {}

    @cached_property
    def new_image(self) -> dict[str, Any] | None:
        return deserialize_item(self._dynamodb.get("NewImage"))

    @cached_property
    def old_image(self) -> dict[str, Any] | None:
        return deserialize_item(self._dynamodb.get("OldImage"))

    def __repr__(self) -> str:
        return (
            f"StreamRecord(shard={self.shard_id}, seq={self._dynamodb.get('SequenceNumber')}, "
            f"event={self.raw.get('eventName')})"
        )


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """What one GetRecords call delivered for one shard."""

    shard: ShardInfo
    records: tuple[StreamRecord, ...]
    millis_behind_latest: int
    next_iterator: str | None  # None once a closed shard has been read to its end

    @property
    def shard_ended(self) -> bool:
        return self.next_iterator is None

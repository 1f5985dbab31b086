"""Stream records as the processor sees them.

A :class:`StreamRecord` wraps one record exactly as DynamoDB Streams sent it on the wire (the
attribute-value encoding, binary still base64) and converts images to Python values only when a
processor asks for them. Sinks that land the wire form (the change log) never pay for conversion,
which is most of what keeps the per-record cost near a plain JSON parse.

Python values follow boto3's ``TypeDeserializer``: ``N`` → ``Decimal``, ``B`` → ``bytes``,
``SS``/``NS``/``BS`` → ``set``, ``M`` → ``dict``, ``L`` → ``list``, ``NULL`` → ``None``. Numbers
use boto3's decimal context *with its traps*: a number that does not fit DynamoDB's 38 digits and
exponent range raises :class:`AttributeValueError` instead of being rounded or flushed to zero,
and so does text that is no number (boto3 would return NaN). The error names the attribute path,
the record and the shard; it is raised where the processor reads the image, so it fails that record
through the processor's normal failure handling (retry, bisect, dead letter).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Clamped, Context, Decimal, DecimalException, Inexact, Overflow, Rounded, Underflow
from functools import cached_property
from typing import Any, Literal

EventName = Literal["INSERT", "MODIFY", "REMOVE"]

# boto3's TypeDeserializer context: DynamoDB's 38 digits and exponent range, with the signals that
# would change a number trapped. Without the traps a 39-digit number is silently rounded and 1E-170
# silently becomes 0 — a processor would then act on a value that is not the item's.
_DYNAMODB_CONTEXT = Context(
    Emin=-128, Emax=126, prec=38, traps=[Clamped, Overflow, Inexact, Rounded, Underflow]
)


class RecordFormatError(ValueError):
    """A stream record that does not have the shape DynamoDB Streams documents."""


class AttributeValueError(RecordFormatError):
    """An attribute value that cannot be converted to a Python value (e.g. a number DynamoDB cannot hold).

    Raised while a processor reads ``keys``/``new_image``/``old_image``, so it names everything an
    operator needs to find the value: the attribute path (``NewImage.items[2].qty``), the record
    (eventID and sequence number) and the shard. Being a ``ValueError`` raised inside the processor
    call, it is a failure of that record like any other: retried, bisected, dead-lettered.
    """

    def __init__(
        self,
        path: str,
        problem: str,
        *,
        event_id: str | None = None,
        sequence_number: str | None = None,
        shard_id: str | None = None,
    ) -> None:
        self.path, self.problem = path, problem
        self.event_id, self.sequence_number, self.shard_id = event_id, sequence_number, shard_id
        shard = f"shard {shard_id}" if shard_id is not None else ""
        record = f"record {event_id!r} (SequenceNumber {sequence_number!r})" if event_id is not None else ""
        where = ", ".join(part for part in (shard, record) if part)
        super().__init__(": ".join(part for part in (where, path, problem) if part))

    def under(self, segment: str) -> AttributeValueError:
        """The same error one container further out (``segment`` + the path so far)."""
        return AttributeValueError(segment + self.path, self.problem)

    def in_record(self, event_id: str, sequence_number: str | None, shard_id: str) -> AttributeValueError:
        return AttributeValueError(
            self.path, self.problem, event_id=event_id, sequence_number=sequence_number, shard_id=shard_id
        )


def _member(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{key!r}]"


def _decimal(text: Any) -> Decimal:
    """An ``N`` value as boto3 converts it, but an error instead of NaN for text that is no number."""
    try:
        number = _DYNAMODB_CONTEXT.create_decimal(text)
    except DecimalException as exc:
        raise AttributeValueError(
            "",
            f"N {text!r} cannot be held exactly by a DynamoDB number (38 significant digits, "
            f"boto3's exponent range): {type(exc).__name__}",
        ) from exc
    except (TypeError, ValueError) as exc:
        raise AttributeValueError("", f"N {text!r} is not a number") from exc
    if not number.is_finite():  # boto3 returns NaN for "abc"; DynamoDB holds no NaN or Infinity
        raise AttributeValueError("", f"N {text!r} is not a number")
    return number


def _binary(raw: Any) -> bytes:
    if isinstance(raw, bytes):
        return raw
    try:
        return base64.b64decode(raw)  # as botocore's parser: not validating
    except (binascii.Error, TypeError, ValueError) as exc:
        raise AttributeValueError("", f"B {str(raw)[:40]!r} is not base64: {exc}") from exc


def _deserialize_map(raw: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return {key: deserialize_value(value) for key, value in raw.items()}
    except AttributeValueError as first:
        # The failure path only (the comprehension above is the hot one): find the member that
        # failed, so the error names its path.
        for key, value in raw.items():
            try:
                deserialize_value(value)
            except AttributeValueError as exc:
                raise exc.under(_member(key)) from exc.__cause__
        raise first  # not reached: conversion is deterministic


def _deserialize_list(raw: list[Any]) -> list[Any]:
    try:
        return [deserialize_value(value) for value in raw]
    except AttributeValueError as first:
        for index, value in enumerate(raw):
            try:
                deserialize_value(value)
            except AttributeValueError as exc:
                raise exc.under(f"[{index}]") from exc.__cause__
        raise first  # not reached: conversion is deterministic


def deserialize_value(value: Mapping[str, Any]) -> Any:
    """One attribute value (``{"S": "x"}``) from its wire form to a Python value.

    Raises :class:`AttributeValueError` (its path relative to ``value``) for a value that cannot be
    converted; :meth:`StreamRecord.keys` and the images add the attribute name, record and shard.
    """
    try:
        ((kind, raw),) = value.items()
    except (AttributeError, ValueError):
        shape = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        raise AttributeValueError("", f"an attribute value has exactly one type key, got {shape}") from None
    try:
        if kind == "S":
            return raw
        if kind == "N":
            return _decimal(raw)
        if kind == "BOOL":
            return bool(raw)
        if kind == "M":
            return _deserialize_map(raw)
        if kind == "L":
            return _deserialize_list(raw)
        if kind == "NULL":
            return None
        if kind == "B":
            return _binary(raw)
        if kind == "SS":
            return set(raw)
        if kind == "NS":
            return {_decimal(n) for n in raw}
        if kind == "BS":
            return {_binary(b) for b in raw}
    except (AttributeError, TypeError) as exc:  # e.g. an "M" that is no map, an "SS" that is no list
        raise AttributeValueError(
            "", f"{kind} value of type {type(raw).__name__} has the wrong shape"
        ) from exc
    raise AttributeValueError("", f"unknown attribute type {kind!r}")


def deserialize_item(item: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An image (``{"name": {"S": "x"}}``) to Python values; errors carry the attribute's path."""
    if item is None:
        return None
    try:
        return _deserialize_map(item)
    except AttributeError as exc:
        raise AttributeValueError("", f"the image is a {type(item).__name__}, not a map") from exc


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
            raise RecordFormatError(
                f"shard {self.shard_id}: record {self.raw.get('eventID')!r} has no 'dynamodb' body"
            ) from None
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
            raise RecordFormatError(
                f"shard {self.shard_id}: record {self.event_id!r} has SequenceNumber {seq!r} (not digits)"
            )
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
        return self._image("Keys") or {}

    @cached_property
    def new_image(self) -> dict[str, Any] | None:
        return self._image("NewImage")

    @cached_property
    def old_image(self) -> dict[str, Any] | None:
        return self._image("OldImage")

    def _image(self, name: str) -> dict[str, Any] | None:
        """Convert one image; a value that cannot be converted names itself, this record and the shard."""
        try:
            return deserialize_item(self._dynamodb.get(name))
        except AttributeValueError as exc:
            where = AttributeValueError(name + exc.path, exc.problem)
            raise where.in_record(
                self.event_id, self._raw_sequence_number(), self.shard_id
            ) from exc.__cause__

    def _raw_sequence_number(self) -> str | None:
        body = self.raw.get("dynamodb")
        seq = body.get("SequenceNumber") if isinstance(body, Mapping) else None
        return None if seq is None else str(seq)

    def __repr__(self) -> str:
        # Safe on any record (it appears in error messages about malformed ones).
        return (
            f"StreamRecord(shard={self.shard_id}, seq={self._raw_sequence_number()}, "
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

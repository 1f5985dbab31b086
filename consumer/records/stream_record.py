"""A stream record's two forms: parsed (:class:`StreamRecord`) and held as its wire bytes
(:class:`WireRecord`, the worker's). Each answers every attribute as the other does; they stand side
by side so that each is read against the other.

A :class:`StreamRecord` wraps one record exactly as DynamoDB Streams sent it on the wire (the
attribute-value encoding, binary still base64) and converts images to Python values
(:mod:`consumer.records.attribute_values`) only when a processor asks for them. Sinks that land the
wire form (the change log) never pay for conversion, which is most of what keeps the per-record cost
near a plain JSON parse.

The worker's records (:class:`WireRecord`, from the GetRecords fast path) go further and hold the
record as its JSON bytes plus the few fields the worker reads on every record (sequence number,
event name, creation time, size): a parsed 1.2 KB record is ~50 dicts and ~38 strs, ~11 x its
bytes, and a worker holds up to shards x ``max_records`` of them between fetch and checkpoint.
``raw``, the images and the fields read now and then (event ID, view type, user identity) are
parsed from the bytes (orjson) when read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import orjson

from consumer.records.attribute_values import deserialize_item
from consumer.records.errors import AttributeValueError, NotAnObjectError, RecordFormatError

EventName = Literal["INSERT", "MODIFY", "REMOVE"]


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """The shard a batch came from, with its lineage."""

    shard_id: str
    parent_shard_ids: tuple[str, ...] = ()


class StreamRecord:
    """One change of one item. ``raw`` is the record as sent on the wire (a mapping).

    Built from an already-parsed mapping (tests, fakes, the scaffold): ``raw`` is that mapping and
    every field is read from it when asked. The worker's own records come from the GetRecords fast
    path as :class:`WireRecord`, which holds the record's bytes instead and parses them on access.
    """

    __slots__ = ("__dict__", "_raw", "shard_id")

    def __init__(self, raw: Mapping[str, Any], shard_id: str) -> None:
        self._raw = raw
        self.shard_id = shard_id

    @property
    def raw(self) -> Mapping[str, Any]:
        """The record in its wire form (attribute values still ``{"S": ...}``, binaries base64)."""
        return self._raw

    @property
    def _dynamodb(self) -> Mapping[str, Any]:
        try:
            body: Mapping[str, Any] = self.raw["dynamodb"]
        except KeyError:
            raise RecordFormatError(
                f"shard {self.shard_id}: record {self.raw.get('eventID')!r} has no 'dynamodb' body"
            ) from None
        if not isinstance(body, Mapping):
            raise RecordFormatError(
                f"shard {self.shard_id}: record {self.raw.get('eventID')!r} has a 'dynamodb' body that is "
                f"a {type(body).__name__}, not an object"
            )
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
    def position(self) -> str:
        """Where the record sits in its shard, as the delivery path orders and checkpoints it
        (:mod:`ground.positions`): a DynamoDB Streams record's sequence number. A Kinesis user record
        adds its sub-sequence number (:class:`consumer.records.kinesis_stream_record.KinesisStreamRecord`)."""
        return self.sequence_number

    @property
    def approximate_creation_time(self) -> float:
        """Epoch seconds (DynamoDB Streams sends a number; boto3 turns it into a datetime)."""
        created = self._dynamodb.get("ApproximateCreationDateTime", 0.0)
        if isinstance(created, bool) or not isinstance(created, int | float):
            raise self._malformed("ApproximateCreationDateTime", created, "not a number of epoch seconds")
        return float(created)

    @property
    def reloaded(self) -> bool:
        """Re-loaded from the table after a gap (``worker.on_trimmed: reload``), not read from the
        stream: its sequence number is no position in the shard (consumer/processing/gap.py)."""
        return self.raw.get("reloaded") is True

    @property
    def size_bytes(self) -> int:
        size = self._dynamodb.get("SizeBytes", 0)
        if isinstance(size, bool) or not isinstance(size, int):
            raise self._malformed("SizeBytes", size, "not a whole number")
        return size

    def _malformed(self, name: str, value: Any, problem: str) -> RecordFormatError:
        """A known field of ``dynamodb`` whose value is not of its documented type: named with the
        record and the shard (fields this parser does not know are never checked: they pass)."""
        return RecordFormatError(
            f"shard {self.shard_id}: record {self.event_id!r} (SequenceNumber "
            f"{self._raw_sequence_number()!r}) has dynamodb.{name} {value!r}: {problem}"
        )

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

    @property
    def typed_keys(self) -> Mapping[str, Any]:
        """The item's key as the stream sends it (DynamoDB's typed JSON, unconverted): what a stable
        hash of the item is taken over (per-key lanes). Reads the held bytes through the one-entry
        parse cache, so a handler that reads the images next does not parse the record again."""
        keys = self._dynamodb.get("Keys")
        return keys if isinstance(keys, Mapping) else {}

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

    def _raw_event_name(self) -> Any:
        return self.raw.get("eventName")

    def __repr__(self) -> str:
        # Safe on any record (it appears in error messages about malformed ones).
        return (
            f"StreamRecord(shard={self.shard_id}, seq={self._raw_sequence_number()}, "
            f"event={self._raw_event_name()})"
        )


# The last record whose bytes were parsed (for an image, or a field not held), and the parse: a
# processor that reads keys, new_image and old_image of one record (or its event ID) parses it once,
# while at most one parsed record (per process) outlives the read. Replaced as a whole tuple, so
# threads only ever see a consistent pair; a miss just parses again. Never handed to users (``raw``
# parses afresh).
_last_parsed: tuple[WireRecord, dict[str, Any]] | None = None

# One str object per known value instead of one per record (and the event name's check).
_EVENT_NAMES: dict[str, EventName] = {"INSERT": "INSERT", "MODIFY": "MODIFY", "REMOVE": "REMOVE"}
_new_wire_record = object.__new__  # WireRecord's __init__ refuses callers; the fast path fills the slots


class WireRecord(StreamRecord):
    """A well-formed record from the GetRecords fast path, held as its bytes.

    Holds the record's JSON (its own slice of the response body, cut when the body is compact as the
    service sends it; else ``orjson.dumps`` of the parsed record) and, as plain attributes, only the
    fields the worker reads on every record: sequence number, event name, creation time and size.
    That is ~1.2 x the record's wire bytes, where the parsed dicts and strs cost ~11 x. The other
    fields (event ID, view type, user identity) read as on :class:`StreamRecord`, from the parsed
    bytes (the last record parsed is kept, so reading them with the images parses once). ``raw``
    parses the bytes on every access (a new dict each time: keep it in a local if you read it
    twice); ``keys``, ``new_image`` and ``old_image`` parse them on first access and keep the
    converted image, as on :class:`StreamRecord`.

    Only records whose held fields are well formed are held this way (:meth:`from_parsed` checks
    them once); any other record stays a :class:`StreamRecord` over its parsed mapping, which raises
    :class:`RecordFormatError` where the malformed field is read, as it always did.
    """

    __slots__ = ("_wire", "approximate_creation_time", "event_name", "sequence_number", "size_bytes")

    _wire: bytes
    event_name: EventName
    sequence_number: str
    approximate_creation_time: float
    size_bytes: int

    def __init__(self, raw: Mapping[str, Any], shard_id: str) -> None:
        raise TypeError(
            "WireRecord is built by the GetRecords fast path (WireRecord.from_parsed); "
            "construct StreamRecord(raw, shard_id) for a record you already hold parsed"
        )

    @classmethod
    def from_parsed(cls, record: Mapping[str, Any], shard_id: str, wire: bytes | None = None) -> StreamRecord:
        """The held form of one parsed wire record, or a :class:`StreamRecord` over the mapping itself
        when a field the worker holds is malformed (it fails where that field is read) or the record
        cannot be written back as JSON.

        ``wire``: the record's own bytes cut from the response body (they must parse to ``record``);
        without them the record is written back with ``orjson.dumps``. Raises
        :class:`NotAnObjectError` for a record that is no mapping at all (a ``Records`` member that
        is not a JSON object): the response is refused, not the record held.
        """
        try:
            body = record.get("dynamodb")
        except AttributeError:  # no mapping at all: a list, a string, a number
            raise NotAnObjectError(
                f"shard {shard_id}: a record is a {type(record).__name__}, not an object"
            ) from None
        if type(body) is not dict:
            return StreamRecord(record, shard_id)
        if wire is None:
            try:
                # orjson's buffer keeps its slack (~4 KB for a 1.2 KB record): hold an exact copy.
                wire = memoryview(orjson.dumps(record)).tobytes()
            except (orjson.JSONEncodeError, TypeError):
                return StreamRecord(record, shard_id)
        held = cls.from_fields(
            wire,
            shard_id,
            event_name=record.get("eventName"),
            sequence_number=body.get("SequenceNumber"),
            created=body.get("ApproximateCreationDateTime", 0.0),
            size=body.get("SizeBytes", 0),
        )
        return StreamRecord(record, shard_id) if held is None else held

    @classmethod
    def from_fields(
        cls, wire: bytes, shard_id: str, *, event_name: Any, sequence_number: Any, created: Any, size: Any
    ) -> WireRecord | None:
        """The held form of record ``wire`` from its held fields, as read from those bytes by a
        parse of them, or None when one is malformed (hold the record as a :class:`StreamRecord`)."""
        # Runs once per record on the worker's hot path: exact type checks (orjson and msgspec give
        # exact types), no ABC isinstance, one attribute store per field.
        name = _EVENT_NAMES.get(event_name) if type(event_name) is str else None
        if (
            type(sequence_number) is not str
            or not sequence_number.isdigit()
            or name is None
            or (type(created) is not float and type(created) is not int)
            or type(size) is not int
        ):
            return None
        held = _new_wire_record(cls)
        held._wire = wire
        held.shard_id = shard_id
        held.sequence_number = sequence_number
        held.event_name = name
        held.approximate_creation_time = created if type(created) is float else float(created)
        held.size_bytes = size
        return held

    def keep_images(self, body: Mapping[str, Any]) -> None:
        """Convert the keys and images now, from ``body`` (this record's ``dynamodb`` member, just
        parsed by the fast path), and keep them as a first read would (``processing.convert_images:
        on_fetch``): a processor that reads them then pays no second parse. An image that cannot be
        converted is left to the first read, which raises its error then, naming the value, the
        record and the shard, inside the processor call as with ``when_read``."""
        kept = self.__dict__
        for name, member in (("keys", "Keys"), ("new_image", "NewImage"), ("old_image", "OldImage")):
            try:
                image = deserialize_item(body.get(member))
            except Exception:  # any failure (a malformed value, nesting too deep): the read raises it
                continue
            kept[name] = image if image is not None or name != "keys" else {}

    @property
    def wire(self) -> bytes:
        """The record's JSON bytes, as held."""
        return self._wire

    @property
    def reloaded(self) -> bool:
        return False  # read from the stream (a reload's records are built as StreamRecord)

    @property
    def raw(self) -> Mapping[str, Any]:
        return self._parse()

    def _kept(self) -> dict[str, Any]:
        """The record parsed, through the one-record cache (never handed to users)."""
        global _last_parsed  # noqa: PLW0603 - a one-entry cache, see above
        last = _last_parsed
        if last is not None and last[0] is self:
            return last[1]
        parsed = self._parse()
        _last_parsed = (self, parsed)
        return parsed

    @property
    def _dynamodb(self) -> Mapping[str, Any]:
        body: Mapping[str, Any] = self._kept()["dynamodb"]
        return body

    @property
    def event_id(self) -> str:
        return str(self._kept().get("eventID", ""))

    @property
    def user_identity(self) -> Mapping[str, Any] | None:
        identity = self._kept().get("userIdentity")
        return identity if isinstance(identity, Mapping) else None

    def _parse(self) -> dict[str, Any]:
        """The held bytes parsed; they are checked to be this record (they always are, unless the
        body was cut wrongly, which the cut's checks rule out: this names the record if not)."""
        try:
            parsed = orjson.loads(self._wire)
        except orjson.JSONDecodeError as exc:
            parsed, problem = None, str(exc)
        else:
            problem = "they are another record"
        body = parsed.get("dynamodb") if type(parsed) is dict else None
        if type(body) is not dict or body.get("SequenceNumber") != self.sequence_number:
            raise RecordFormatError(
                f"shard {self.shard_id}: the held bytes of the record with SequenceNumber "
                f"{self.sequence_number} do not parse to it: {problem}"
            )
        return parsed  # type: ignore[no-any-return]

    def _raw_sequence_number(self) -> str | None:
        return self.sequence_number

    def _raw_event_name(self) -> Any:
        return self.event_name


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

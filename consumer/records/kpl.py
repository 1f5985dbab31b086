"""KPL-aggregated Kinesis records, de-aggregated into the user records they carry, as the Java KCL does.

The Kinesis Producer Library packs many *user records* into one Kinesis record (its published
aggregation format)::

    F3 89 9A C2 | protobuf AggregatedRecord | MD5 of the protobuf (16 bytes)

    message AggregatedRecord { repeated string partition_key_table = 1;
                               repeated string explicit_hash_key_table = 2;
                               repeated Record records = 3; }
    message Record { required uint64 partition_key_index = 1;
                     optional uint64 explicit_hash_key_index = 2;
                     required bytes data = 3;
                     repeated Tag tags = 4; }
    message Tag { required string key = 1; optional string value = 2; }

User record ``i`` of a Kinesis record is addressed by the Kinesis record's sequence number and the
*sub-sequence number* ``i`` (from 0, in the order of ``records``); a checkpoint carries both, so a
worker can resume inside an aggregated record.

What the Java KCL does with a record that is not a well-formed aggregate, followed here:

* no magic, or nothing after the magic but a digest (or less): a plain record, delivered as is
  (sub-sequence number 0, not aggregated);
* a digest that does not match the protobuf (a truncated or corrupted record), or a protobuf that
  does not parse (a required field missing included): delivered as is, raw, like a plain record;
* a user record whose hash key (its explicit hash key, else the MD5 of its partition key) lies
  outside the shard's hash-key range: the whole aggregate yields nothing. The KPL checks on which
  shard each put landed and puts again the user records of an aggregate that landed on a shard other
  than the one it predicted (a stale shard map after a reshard), so those user records are read
  from their right shard and this copy would be a duplicate.

One difference, on the side of losing nothing: where a partition-key or explicit-hash-key index
points outside its table, the Java KCL logs the aggregate and delivers the user records before the
bad one only; here the aggregate is delivered raw, like any other malformed aggregate, and the
outcome says why.

The protobuf reader below is the few lines the format needs (varints and length-delimited fields;
unknown fields skipped as protobuf readers skip them). Pure: bytes in, user records out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

MAGIC = b"\xf3\x89\x9a\xc2"
DIGEST_BYTES = 16
HASH_KEY_SPACE = (0, 2**128 - 1)

Outcome = Literal["plain", "aggregated", "bad_digest", "bad_protobuf", "outside_shard"]

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True, slots=True)
class UserRecord:
    """One user record: a KPL user record, or a whole Kinesis record that was not an aggregate."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | None
    sub_sequence_number: int
    aggregated: bool


@dataclass(frozen=True, slots=True)
class Deaggregated:
    """The user records of one Kinesis record, and what it was (``outcome`` names a bad aggregate)."""

    records: tuple[UserRecord, ...]
    outcome: Outcome


class _MalformedError(ValueError):
    """The protobuf does not parse as an AggregatedRecord (the record is delivered raw)."""


def hash_key_of(partition_key: str) -> int:
    """Where Kinesis places a partition key: the MD5 of its UTF-8 bytes as a 128-bit integer."""
    return int.from_bytes(hashlib.md5(partition_key.encode()).digest(), "big")


def is_aggregated(data: bytes) -> bool:
    """Whether ``data`` is shaped as an aggregate (magic, then more than a digest); not yet checked."""
    return data[: len(MAGIC)] == MAGIC and len(data) > len(MAGIC) + DIGEST_BYTES


def deaggregate(
    data: bytes, partition_key: str, hash_range: tuple[int, int] = HASH_KEY_SPACE
) -> Deaggregated:
    """The user records of one Kinesis record read from a shard covering ``hash_range`` (inclusive)."""
    raw = (UserRecord(data, partition_key, None, 0, aggregated=False),)
    if not is_aggregated(data):
        return Deaggregated(raw, "plain")
    message, digest = data[len(MAGIC) : -DIGEST_BYTES], data[-DIGEST_BYTES:]
    if hashlib.md5(message).digest() != digest:
        return Deaggregated(raw, "bad_digest")
    try:
        keys, explicit_keys, entries = _aggregated_record(message)
        users = tuple(
            UserRecord(
                payload,
                _entry(keys, key_index, "partition_key_index"),
                None
                if explicit_index is None
                else _entry(explicit_keys, explicit_index, "explicit_hash_key_index"),
                sub,
                aggregated=True,
            )
            for sub, (key_index, explicit_index, payload) in enumerate(entries)
        )
        hash_keys = [_hash_key(user) for user in users]
    except _MalformedError:
        return Deaggregated(raw, "bad_protobuf")
    low, high = hash_range
    if any(not low <= key <= high for key in hash_keys):
        return Deaggregated((), "outside_shard")
    return Deaggregated(users, "aggregated")


def _entry(table: list[str], index: int, field: str) -> str:
    if index >= len(table):
        raise _MalformedError(f"{field} {index} outside a table of {len(table)}")
    return table[index]


def _hash_key(user: UserRecord) -> int:
    if user.explicit_hash_key is None:
        return hash_key_of(user.partition_key)
    if not user.explicit_hash_key.isascii() or not user.explicit_hash_key.isdigit():
        raise _MalformedError(f"explicit hash key {user.explicit_hash_key!r} is not a decimal integer")
    return int(user.explicit_hash_key)


# ------------------------------------------------------------------------------ protobuf


def _aggregated_record(message: bytes) -> tuple[list[str], list[str], list[tuple[int, int | None, bytes]]]:
    keys: list[str] = []
    explicit_keys: list[str] = []
    entries: list[tuple[int, int | None, bytes]] = []
    for number, value in _fields(message):
        if number == 1 and isinstance(value, bytes):
            keys.append(_text(value))
        elif number == 2 and isinstance(value, bytes):
            explicit_keys.append(_text(value))
        elif number == 3 and isinstance(value, bytes):
            entries.append(_record(value))
    return keys, explicit_keys, entries


def _record(message: bytes) -> tuple[int, int | None, bytes]:
    key_index: int | None = None
    explicit_index: int | None = None
    payload: bytes | None = None
    for number, value in _fields(message):
        if number == 1 and isinstance(value, int):
            key_index = value
        elif number == 2 and isinstance(value, int):
            explicit_index = value
        elif number == 3 and isinstance(value, bytes):
            payload = value
        elif number == 4 and isinstance(value, bytes):
            _tag(value)
    if key_index is None or payload is None:
        raise _MalformedError("a Record lacks its required partition_key_index or data")
    return key_index, explicit_index, payload


def _tag(message: bytes) -> None:
    """Tags carry nothing a consumer reads, but a Tag without its required key fails the parse."""
    keys = [value for number, value in _fields(message) if number == 1 and isinstance(value, bytes)]
    if not keys:
        raise _MalformedError("a Tag lacks its required key")


def _fields(message: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for a varint, the bytes of a length-delimited one.

    Fixed-width fields are skipped (the format has none), and a known field number with another
    wire type than the format's is skipped by the callers: protobuf readers treat both as unknown
    fields, never misread them."""
    at = 0
    while at < len(message):
        tag, at = _varint(message, at)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise _MalformedError("field number 0")
        if wire_type == _VARINT:
            value, at = _varint(message, at)
            yield number, value
            continue
        if wire_type == _LENGTH:
            size, at = _varint(message, at)
        elif wire_type in (_FIXED64, _FIXED32):
            size = 8 if wire_type == _FIXED64 else 4
        else:
            raise _MalformedError(f"wire type {wire_type} (groups are not part of the format)")
        if at + size > len(message):
            raise _MalformedError("a field runs past the end of the message")
        if wire_type == _LENGTH:
            yield number, message[at : at + size]
        at += size


def _varint(message: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while at < len(message):
        byte = message[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value >= 2**64:
                raise _MalformedError("a varint over 64 bits")
            return value, at
        shift += 7
        if shift >= 70:
            raise _MalformedError("a varint longer than 10 bytes")
    raise _MalformedError("a varint runs past the end of the message")


def _text(value: bytes) -> str:
    # Java's protobuf reads a proto2 string's invalid UTF-8 as replacement characters, not an error.
    return value.decode("utf-8", errors="replace")

"""An encoder of the KPL's published aggregation format, for tests: a corpus built from the format
itself, never from the decoder under test.

    F3 89 9A C2 | protobuf AggregatedRecord | MD5 of the protobuf

AggregatedRecord: 1 partition_key_table (string, repeated), 2 explicit_hash_key_table (string,
repeated), 3 records (Record, repeated). Record: 1 partition_key_index (uint64), 2
explicit_hash_key_index (uint64, optional), 3 data (bytes), 4 tags (Tag, repeated). Tag: 1 key,
2 value (strings). proto2: fields in any order are valid, and unknown fields are skipped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

MAGIC = bytes([0xF3, 0x89, 0x9A, 0xC2])


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def length_delimited(number: int, payload: bytes) -> bytes:
    return key(number, 2) + varint(len(payload)) + payload


def uint(number: int, value: int) -> bytes:
    return key(number, 0) + varint(value)


@dataclass(frozen=True)
class User:
    """A user record as a producer hands it to the KPL."""

    partition_key: str
    data: bytes
    explicit_hash_key: str | None = None
    tags: tuple[tuple[str, str | None], ...] = field(default=())


def record_message(
    partition_key_index: int | None,
    data: bytes | None,
    explicit_hash_key_index: int | None = None,
    tags: Sequence[tuple[str, str | None]] = (),
) -> bytes:
    """One Record message (a field left None is left out: a broken record for the error cases)."""
    out = b""
    if partition_key_index is not None:
        out += uint(1, partition_key_index)
    if explicit_hash_key_index is not None:
        out += uint(2, explicit_hash_key_index)
    if data is not None:
        out += length_delimited(3, data)
    for tag_key, tag_value in tags:
        tag = length_delimited(1, tag_key.encode()) + (
            b"" if tag_value is None else length_delimited(2, tag_value.encode())
        )
        out += length_delimited(4, tag)
    return out


def aggregated_message(users: Sequence[User]) -> bytes:
    """The AggregatedRecord protobuf of ``users``, with shared key tables as the KPL builds them."""
    keys: list[str] = []
    explicit: list[str] = []
    records = b""
    for user in users:
        if user.partition_key not in keys:
            keys.append(user.partition_key)
        explicit_index = None
        if user.explicit_hash_key is not None:
            if user.explicit_hash_key not in explicit:
                explicit.append(user.explicit_hash_key)
            explicit_index = explicit.index(user.explicit_hash_key)
        records += length_delimited(
            3, record_message(keys.index(user.partition_key), user.data, explicit_index, user.tags)
        )
    tables = b"".join(length_delimited(1, k.encode()) for k in keys)
    tables += b"".join(length_delimited(2, k.encode()) for k in explicit)
    return tables + records


def frame(message: bytes) -> bytes:
    """Magic + message + the message's MD5: a Kinesis record's data."""
    return MAGIC + message + hashlib.md5(message).digest()


def aggregate(users: Sequence[User]) -> bytes:
    return frame(aggregated_message(users))

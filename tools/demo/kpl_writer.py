"""KPL aggregation for the Kinesis demo's load: several user records of one partition key packed into
one Kinesis record, in the KPL's published format (what consumer/records/kpl.py reads)::

    F3 89 9A C2 | protobuf AggregatedRecord | MD5 of the protobuf (16 bytes)

Every user record of an aggregate has the aggregate's partition key, so all of them hash to the shard
the Kinesis record lands on (the KPL aggregates only records bound for one shard) and the key's
records keep the stream's order. Pure: strings and bytes in, bytes out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

MAGIC = b"\xf3\x89\x9a\xc2"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def aggregate(partition_key: str, datas: Sequence[bytes]) -> bytes:
    """One Kinesis record's data carrying ``datas`` as user records (sub-sequence numbers 0, 1, ...)
    of ``partition_key``: a partition-key table of one entry, each Record pointing at it."""
    if not datas:
        raise ValueError("an aggregate carries at least one user record")
    records = b"".join(_field(3, _varint(1 << 3 | 0) + _varint(0) + _field(3, data)) for data in datas)
    message = _field(1, partition_key.encode()) + records
    return MAGIC + message + hashlib.md5(message).digest()

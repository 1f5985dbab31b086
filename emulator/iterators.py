"""Shard iterators: opaque to clients, self-describing to the emulator.

A token carries the stream, the shard, the position (read records *after* this sequence number)
and when it was issued, so the emulator keeps no per-iterator state and an iterator survives being
used by another client, as on AWS. Anything that does not decode is a ValidationException.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from emulator.errors import validation

_SEPARATOR = "|"
_VERSION = "e1"


@dataclass(frozen=True)
class IteratorPosition:
    stream_arn: str
    shard_id: str
    after_seq: int
    issued_ms: int


def encode(position: IteratorPosition, nonce: int) -> str:
    text = _SEPARATOR.join(
        (_VERSION, position.stream_arn, position.shard_id, str(position.after_seq), str(position.issued_ms))
    )
    payload = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    return f"{payload}.{nonce:x}"


def decode(token: object) -> IteratorPosition:
    if not isinstance(token, str) or not token:
        raise validation("ShardIterator is required and must be a string")
    payload, _, _ = token.partition(".")
    try:
        text = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()
        version, arn, shard_id, after, issued = text.split(_SEPARATOR)
        if version != _VERSION:
            raise ValueError(version)
        return IteratorPosition(arn, shard_id, int(after), int(issued))
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise validation(f"Invalid ShardIterator: {token[:64]!r} was not issued by this endpoint") from exc

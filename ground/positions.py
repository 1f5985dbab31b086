"""Where a shard is read from and how far it was processed: the checkpoint sentinels, in one place.

A checkpoint is either a position in a shard (a sequence number, see below) or one of these words,
as the Java KCL writes them into the leases table: the lease store, shard sync, the lifecycle and
the stream adapter all speak the same words, so they are defined once, at the ground floor that
every layer may import.
"""

from __future__ import annotations

from typing import Final, Literal

TRIM_HORIZON: Final = "TRIM_HORIZON"
"""The oldest record the stream still holds (24 h back)."""
LATEST: Final = "LATEST"
"""Just after the newest record: only what is written from now on."""
SHARD_END: Final = "SHARD_END"
"""The shard is closed and every record of it was processed: its children may start."""
AT_TIMESTAMP: Final = "AT_TIMESTAMP"
"""Written by KCL applications on Kinesis; DynamoDB Streams has no timestamp iterator."""

SENTINELS: Final = (AT_TIMESTAMP, TRIM_HORIZON, LATEST, SHARD_END)
InitialPosition = Literal["TRIM_HORIZON", "LATEST"]

# A position inside a shard, as text: a sequence number ("<digits>"), or, for a user record of a
# KPL-aggregated Kinesis record, the sequence number and the user record's sub-sequence number
# ("<digits>.<sub>"; sub-sequence 0 is written as the plain sequence number, as the Java KCL orders
# them: a plain record and an aggregate's first user record both sit at (sequence, 0)). The form is
# the one ExtendedSequenceNumber prints, so a lease's checkpoint goes to the lifecycle as this text.
SUB_SEQUENCE_SPAN: Final = 1 << 32
"""Above any sub-sequence number: a Kinesis record is at most 1 MiB, so an aggregate holds far
fewer user records than this."""


def split_position(position: str) -> tuple[str, int]:
    """``"<digits>"`` or ``"<digits>.<sub>"`` as (sequence number, sub-sequence number).

    Raises ValueError for anything else (a sentinel included: it is no position in a shard)."""
    sequence, dot, sub = position.partition(".")
    if not sequence.isdigit() or (dot and not sub.isdigit()):
        raise ValueError(f"{position!r} is not a position in a shard (digits, or digits.sub-sequence)")
    sub_sequence = int(sub) if dot else 0
    if sub_sequence >= SUB_SEQUENCE_SPAN:
        raise ValueError(f"{position!r}: sub-sequence number {sub_sequence} is out of range")
    return sequence, sub_sequence


def is_position(text: str) -> bool:
    """A position in a shard (digits, or digits.sub-sequence), not a sentinel."""
    try:
        split_position(text)
    except ValueError:
        return False
    return True


def position_text(sequence: str, sub_sequence: int = 0) -> str:
    """The text of (sequence number, sub-sequence number): the plain sequence number at sub-sequence 0."""
    return sequence if not sub_sequence else f"{sequence}.{sub_sequence}"


def ordinal(position: str) -> int:
    """A position as one integer in the shard's order (sequence number, then sub-sequence number):
    what the delivery path compares, so that the user records of one aggregate, which share their
    sequence number, are told apart and ordered. DynamoDB Streams' records (no sub-sequence) keep
    their order: ``int(sequence) * SUB_SEQUENCE_SPAN``."""
    sequence, sub_sequence = split_position(position)
    return int(sequence) * SUB_SEQUENCE_SPAN + sub_sequence


def position_of(number: int) -> str:
    """The text of an :func:`ordinal` (its inverse)."""
    sequence, sub_sequence = divmod(number, SUB_SEQUENCE_SPAN)
    return position_text(str(sequence), sub_sequence)

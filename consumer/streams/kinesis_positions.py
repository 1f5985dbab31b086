"""Where a Kinesis shard is read from when a lease is taken up, as the Java KCL reads it.

DynamoDB Streams' reader resumes just *after* a checkpoint (``Position.from_checkpoint``). On Kinesis a
checkpoint names a user record, which may sit inside a KPL-aggregated record: the Java KCL reads *at*
the checkpoint's sequence number and drops every user record at or below the checkpoint
(:func:`consumer.records.kinesis_record.after_checkpoint`), which resumes inside an aggregate and,
for a plain record (sub-sequence 0), just after it. The same here, so a table a KCL application
wrote is taken up where it stopped: nothing at or below a checkpoint is delivered again.
"""

from __future__ import annotations

from consumer.streams.source import Position
from ground.positions import AT_TIMESTAMP, LATEST, SHARD_END, TRIM_HORIZON


def kinesis_resume_position(checkpoint: str) -> Position:
    """The iterator position of a lease's checkpoint on a Kinesis shard.

    ``AT_TIMESTAMP`` (KCL's initial position by time, whose timestamp is the application's setting,
    not the table's) resumes at TRIM_HORIZON, the choice that loses nothing. SHARD_END has no
    position: the shard is finished."""
    if checkpoint in (TRIM_HORIZON, AT_TIMESTAMP):
        return Position.trim_horizon()
    if checkpoint == LATEST:
        return Position.latest()
    if checkpoint == SHARD_END:
        raise ValueError("a shard checkpointed at SHARD_END is finished: there is nothing to read")
    return Position.at(checkpoint)


def checkpoint_record_gone(checkpoint: str, first_sequence_read: str | None) -> bool:
    """Whether the record a checkpoint names is no longer in the shard: records after it may have been
    trimmed by retention before anyone read them.

    Kinesis says nothing when a position was trimmed (an iterator before the trim horizon reads from
    the horizon), but a checkpoint names a record that was delivered, and a read *at* it starts with
    that very record while retention keeps it. So the first record of the first non-empty answer
    (``first_sequence_read``; None when the reader reached the tip or the shard's end with nothing)
    must be the checkpoint's own; anything else is a loud gap, as TrimmedDataAccessException is on
    DynamoDB Streams. A sentinel checkpoint names no record: never a gap here."""
    if not checkpoint.isdigit():
        return False
    return first_sequence_read is None or int(first_sequence_read) != int(checkpoint)

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

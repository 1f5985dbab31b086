"""A Kinesis record as a processor receives it, and where a checkpoint leaves a shard's records.

One GetRecords record becomes one :class:`KinesisRecord`, or several when the KPL aggregated it
(:mod:`consumer.records.kpl`): each user record has the Kinesis record's sequence number and its own
sub-sequence number, the pair the Java KCL checkpoints (``checkpoint`` and
``checkpointSubSequenceNumber``) and orders by: sequence number as an integer, then sub-sequence.

Resuming from a checkpoint is the Java KCL's: read the shard *at* the checkpoint's sequence number
and drop every user record at or below the checkpoint (:func:`after_checkpoint`), so a checkpoint
inside an aggregated record resumes inside it, and a checkpoint at a plain record (sub-sequence 0)
resumes after it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consumer.records.errors import RecordFormatError
from consumer.records.kpl import HASH_KEY_SPACE, Outcome, deaggregate
from ground.positions import AT_TIMESTAMP, LATEST, SHARD_END, TRIM_HORIZON


@dataclass(frozen=True, slots=True)
class KinesisRecord:
    """One user record of a Kinesis shard: data as bytes, its partition key, its place in the shard."""

    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    data: bytes
    approximate_arrival_timestamp: float  # epoch seconds, as Kinesis gives it
    explicit_hash_key: str | None = None
    aggregated: bool = False

    @property
    def extended_sequence_number(self) -> tuple[int, int]:
        """KCL's order of user records: the sequence number as an integer, then the sub-sequence."""
        return int(self.sequence_number), self.sub_sequence_number


def user_records(
    shard_id: str, record: Mapping[str, Any], hash_range: tuple[int, int] = HASH_KEY_SPACE
) -> tuple[KinesisRecord, ...]:
    """The user records of one GetRecords record (boto3's form: ``Data`` bytes, the timestamp a
    datetime; or the wire's: base64 text, epoch seconds) read from a shard covering ``hash_range``."""
    return read_record(shard_id, record, hash_range)[0]


def read_record(
    shard_id: str, record: Mapping[str, Any], hash_range: tuple[int, int] = HASH_KEY_SPACE
) -> tuple[tuple[KinesisRecord, ...], Outcome]:
    """:func:`user_records` and what the record was (plain, an aggregate, a malformed one, ...)."""
    sequence = record.get("SequenceNumber")
    if not isinstance(sequence, str) or not sequence.isdigit():
        raise RecordFormatError(
            f"shard {shard_id}: a Kinesis record's SequenceNumber must be digits, got {sequence!r}"
        )
    key = record.get("PartitionKey")
    if not isinstance(key, str):
        raise RecordFormatError(f"shard {shard_id}: record {sequence} has no PartitionKey")
    data, arrival = (
        _data(record.get("Data"), shard_id, sequence),
        _seconds(record.get("ApproximateArrivalTimestamp")),
    )
    result = deaggregate(data, key, hash_range)
    users = tuple(
        KinesisRecord(
            shard_id,
            sequence,
            user.sub_sequence_number,
            user.partition_key,
            user.data,
            arrival,
            user.explicit_hash_key,
            user.aggregated,
        )
        for user in result.records
    )
    return users, result.outcome


def after_checkpoint(
    records: Iterable[KinesisRecord], checkpoint: str, sub_sequence: int = 0
) -> tuple[KinesisRecord, ...]:
    """The records a worker resuming from the checkpoint delivers: none at or below it.

    A sentinel other than SHARD_END (TRIM_HORIZON, LATEST, AT_TIMESTAMP) drops nothing: the position
    was chosen by the iterator. SHARD_END drops everything (the shard was finished)."""
    if checkpoint == SHARD_END:
        return ()
    if checkpoint in (TRIM_HORIZON, LATEST, AT_TIMESTAMP):
        return tuple(records)
    if not checkpoint.isdigit():
        raise ValueError(f"checkpoint {checkpoint!r} is neither digits nor a sentinel")
    done = (int(checkpoint), sub_sequence)
    return tuple(r for r in records if r.extended_sequence_number > done)


def _data(value: object, shard_id: str, sequence: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise RecordFormatError(f"shard {shard_id}: record {sequence}'s Data is neither bytes nor base64")


def _seconds(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0  # an absent arrival time (the API marks it optional) reads as unknown, not as an error

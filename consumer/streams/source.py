"""The stream source port: what the worker needs from DynamoDB Streams, and nothing more.

The lifecycle, the shard sync and the tests are written against :class:`StreamSource`; the
DynamoDB Streams adapter (:mod:`consumer.streams.dynamodb`) is one implementation, a fake in a test is
another. Values crossing the port are small frozen dataclasses, so callers never see botocore's dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from consumer.records import StreamRecord

__all__ = ["GetRecordsResult", "Position", "Shard", "StreamDescription", "StreamSource"]

IteratorType = Literal["TRIM_HORIZON", "LATEST", "AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"]
_NAMED = ("TRIM_HORIZON", "LATEST")


@dataclass(frozen=True, slots=True)
class Position:
    """Where an iterator starts: ``Position.TRIM_HORIZON``, ``Position.LATEST``, ``at(n)`` or ``after(n)``."""

    type: IteratorType
    sequence_number: str | None = None

    def __post_init__(self) -> None:
        if self.type in _NAMED:
            if self.sequence_number is not None:
                raise ValueError(f"{self.type} takes no sequence number")
            return
        if self.type not in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            raise ValueError(f"unknown iterator type {self.type!r}")
        if not isinstance(self.sequence_number, str) or not self.sequence_number.isdigit():
            raise ValueError(f"{self.type} needs a sequence number of digits, got {self.sequence_number!r}")

    @classmethod
    def trim_horizon(cls) -> Position:
        return cls("TRIM_HORIZON")

    @classmethod
    def latest(cls) -> Position:
        return cls("LATEST")

    @classmethod
    def at(cls, sequence_number: str) -> Position:
        return cls("AT_SEQUENCE_NUMBER", sequence_number)

    @classmethod
    def after(cls, sequence_number: str) -> Position:
        return cls("AFTER_SEQUENCE_NUMBER", sequence_number)

    @classmethod
    def from_checkpoint(cls, checkpoint: str) -> Position:
        """Where to resume from a lease checkpoint: a sentinel as is, digits → just after them.

        SHARD_END has no position (the shard is finished: nothing to read), so it is refused.
        ``AT_TIMESTAMP`` (found in a table a Java KCL application wrote) has no counterpart in
        DynamoDB Streams, which offers no timestamp iterator: it resumes at TRIM_HORIZON, the choice
        that loses nothing (records older than the timestamp may be delivered again).
        """
        if checkpoint in _NAMED:
            return cls(checkpoint)  # type: ignore[arg-type]
        if checkpoint == "AT_TIMESTAMP":
            return cls.trim_horizon()
        if checkpoint.isdigit():
            return cls.after(checkpoint)
        raise ValueError(
            f"checkpoint {checkpoint!r} has no stream position (expected TRIM_HORIZON, LATEST or digits)"
        )


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard as DescribeStream (or Kinesis' ListShards) listed it. Open while it has no ending
    sequence number. A Kinesis merge's child has a second parent, ``adjacent_parent_shard_id``
    (AdjacentParentShardId); a DynamoDB Streams shard never has one."""

    shard_id: str
    parent_shard_id: str | None = None
    starting_sequence_number: str | None = None
    ending_sequence_number: str | None = None
    adjacent_parent_shard_id: str | None = None

    @property
    def is_open(self) -> bool:
        return self.ending_sequence_number is None

    @property
    def parent_shard_ids(self) -> tuple[str, ...]:
        """Every parent: none, one, or (a Kinesis merge) two."""
        return tuple(p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p)


@dataclass(frozen=True, slots=True)
class StreamDescription:
    """DescribeStream's answer with every page of shards gathered."""

    stream_arn: str
    table_name: str
    status: str  # ENABLING | ENABLED | DISABLING | DISABLED
    view_type: str  # NEW_AND_OLD_IMAGES | NEW_IMAGE | OLD_IMAGE | KEYS_ONLY
    stream_label: str
    shards: tuple[Shard, ...]


@dataclass(frozen=True, slots=True)
class GetRecordsResult:
    """One GetRecords call. ``next_iterator`` is None once a closed shard has been read to its end."""

    records: tuple[StreamRecord, ...]
    next_iterator: str | None
    millis_behind_latest: int

    @property
    def shard_ended(self) -> bool:
        return self.next_iterator is None


class StreamSource(Protocol):
    def find_stream(self, table_name: str) -> str:
        """The ARN of the table's current stream; StreamNotFoundError when the table has none."""
        ...

    def stream_description(self, stream_arn: str) -> StreamDescription:
        """Status, view type and every shard (DescribeStream paged to the end)."""
        ...

    def list_shards(self, stream_arn: str) -> tuple[Shard, ...]:
        """Every shard of the stream (paged to the end); eventually consistent, see ShardGraph."""
        ...

    def child_shards(self, stream_arn: str, shard_id: str) -> tuple[Shard, ...]:
        """The children of one shard (ShardFilter CHILD_SHARDS), asked for at the shard's end."""
        ...

    def get_iterator(self, stream_arn: str, shard_id: str, position: Position) -> str: ...

    def get_records(
        self, iterator: str, limit: int, shard_id: str, *, convert_images: bool = False
    ) -> GetRecordsResult:
        """Up to ``limit`` records (≤ 1000) from ``iterator``; ``shard_id`` labels the records.
        ``convert_images``: their keys and images converted to Python values as they are read
        (``processing.convert_images: on_fetch``); a source may ignore it (they convert when read)."""
        ...

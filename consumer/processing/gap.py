"""A shard's trimmed data, told to the processor, and the records re-loaded from the table for it.

With ``worker.on_trimmed: reload`` a shard whose data was trimmed before it was read is repaired
from the table itself (docs/processing.md, "Trimmed data"): the processor is told of the gap
(:class:`GapEvent`, phase ``gap``), then receives every item of the table, read by a paced parallel
Scan, as synthetic ``MODIFY`` records marked as re-loaded (:func:`reloaded_record`), then the same
event again in phase ``reloaded``, and only then the shard's first readable record.

What a re-loaded record is: ``eventName`` MODIFY, ``dynamodb.NewImage`` the item as the Scan read
it, no ``OldImage``, ``dynamodb.ApproximateCreationDateTime`` the reload's start (:attr:`GapEvent.
reload_started_at`: the table as the reload read it is the state at or after that time), a
``SequenceNumber`` that counts the reload's records from 1 (not a position in any shard), and two
fields of its own at the top level: ``"reloaded": true`` and ``"reloadId"``. They reach the Lambda
form's event unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from consumer.records import ShardInfo, StreamRecord

GapPhase = Literal["gap", "reloaded"]
RELOADED_FIELD = "reloaded"
RELOAD_ID_FIELD = "reloadId"


@dataclass(frozen=True, slots=True)
class GapEvent:
    """A shard's data trimmed before it was read, and the reload that repairs it.

    ``phase`` ``gap``: the reload is about to be delivered; ``reloaded``: every item the reload read
    was delivered (``records_reloaded`` of them). Positions are the shard's: ``last_position`` the
    last one read (a sequence number, or TRIM_HORIZON / LATEST when nothing of the shard was read),
    ``first_readable`` the first record still in the stream (None: none is left, or none yet).
    Times are epoch seconds; ``lost_from`` is the creation time of the last record read before the
    gap, when this worker read it (None otherwise); ``lost_until`` the first readable record's (None
    when there is none: the gap reaches to ``reload_started_at``).
    """

    shard: ShardInfo
    phase: GapPhase
    last_position: str
    first_readable: str | None
    lost_from: float | None
    lost_until: float | None
    reload_id: str
    reload_started_at: float
    records_reloaded: int = 0

    def as_json(self) -> dict[str, Any]:
        """The event as the Lambda form's marker carries it (``event["gap"]``)."""
        return {
            "phase": self.phase,
            "shardId": self.shard.shard_id,
            "lastPosition": self.last_position,
            "firstReadable": self.first_readable,
            "lostFrom": self.lost_from,
            "lostUntil": self.lost_until,
            "reloadId": self.reload_id,
            "reloadStartedAt": self.reload_started_at,
            "recordsReloaded": self.records_reloaded,
        }

    def finished(self, records: int) -> GapEvent:
        return GapEvent(
            self.shard,
            "reloaded",
            self.last_position,
            self.first_readable,
            self.lost_from,
            self.lost_until,
            self.reload_id,
            self.reload_started_at,
            records,
        )


def reload_id(shard_id: str, started_at_millis: int) -> str:
    """One reload attempt's name: a reload started again (after a crash) is a new attempt."""
    return f"{started_at_millis:013d}-{shard_id}"


def item_size(item: Mapping[str, Any]) -> int:
    """An approximation of DynamoDB's item size (names plus values), for ``SizeBytes``."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: Any) -> int:
    if isinstance(value, Mapping):
        return sum(_value_size(v) for v in value.values()) + 1
    if isinstance(value, list):
        return sum(_value_size(v) for v in value) + 1
    return len(str(value).encode())


def reloaded_record(
    item: Mapping[str, Any],
    *,
    key_names: tuple[str, ...],
    number: int,
    gap: GapEvent,
    view_type: str = "NEW_AND_OLD_IMAGES",
    region: str | None = None,
) -> StreamRecord:
    """The synthetic MODIFY that re-delivers ``item`` (its wire form, as Scan returns it)."""
    body = {
        "ApproximateCreationDateTime": gap.reload_started_at,
        "Keys": {name: item[name] for name in key_names if name in item},
        "NewImage": dict(item),
        "SequenceNumber": str(number),
        "SizeBytes": item_size(item),
        "StreamViewType": view_type,
    }
    raw: dict[str, Any] = {
        "eventID": f"reload-{gap.reload_id}-{number}",
        "eventName": "MODIFY",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "dynamodb": body,
        RELOADED_FIELD: True,
        RELOAD_ID_FIELD: gap.reload_id,
    }
    if region is not None:
        raw["awsRegion"] = region
    return StreamRecord(raw, gap.shard.shard_id)


def is_reloaded(record: StreamRecord) -> bool:
    """A record re-loaded from the table (never one read from the stream)."""
    return record.raw.get(RELOADED_FIELD) is True

"""A Kinesis user record in the worker's delivery path, where every record is a :class:`StreamRecord`.

The lifecycle, the runners (retries, bisection, dead letters, lanes, parked keys) and the forms
(function, class, Lambda) are written against :class:`StreamRecord`; a Kinesis source hands them
:class:`KinesisStreamRecord`, which answers what they ask of a record in Kinesis' terms:

* ``position`` is the sequence number with the user record's sub-sequence number
  (:mod:`ground.positions`): the user records of one KPL aggregate share their sequence number, and
  the delivery path orders, filters and checkpoints by position, so a checkpoint inside an aggregate
  is written as the Java KCL writes it (``checkpoint`` and ``checkpointSubSequenceNumber``);
* the item's key, what per-key lanes and parked keys group by, is the partition key
  (``{"partitionKey": {"S": <key>}}``): one partition key's records keep their order;
* ``approximate_creation_time`` is the arrival time Kinesis stamps (end-to-end lag, windows);
* ``raw`` is the record as Lambda's Kinesis event carries it (``kinesis.data`` base64), with the
  sub-sequence number beside the sequence number: what a dead letter keeps;
* a Kinesis record has no DynamoDB event name, image or view type: ``event_name`` raises (a filter
  on event names is for a table's stream), the images are None.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from consumer.records.errors import RecordFormatError
from consumer.records.kinesis_record import KinesisRecord
from consumer.records.stream_record import EventName, StreamRecord
from ground.positions import position_text

KINESIS_EVENT_NAME = "aws:kinesis:record"


def _raw(record: KinesisRecord) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kinesisSchemaVersion": "1.0",
        "partitionKey": record.partition_key,
        "sequenceNumber": record.sequence_number,
        "data": base64.b64encode(record.data).decode("ascii"),
        "approximateArrivalTimestamp": record.approximate_arrival_timestamp,
    }
    if record.aggregated:
        body["subSequenceNumber"] = record.sub_sequence_number
    if record.explicit_hash_key is not None:
        body["explicitHashKey"] = record.explicit_hash_key
    return {
        "kinesis": body,
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{record.shard_id}:{record.sequence_number}",
        "eventName": KINESIS_EVENT_NAME,
    }


class KinesisStreamRecord(StreamRecord):
    """One user record of a Kinesis shard, as the delivery path handles every record."""

    def __init__(self, record: KinesisRecord) -> None:
        super().__init__(_raw(record), record.shard_id)
        self.kinesis = record

    # ---------------------------------------------------------------- where it sits in the shard

    @property
    def sequence_number(self) -> str:
        return self.kinesis.sequence_number

    @property
    def sub_sequence_number(self) -> int:
        return self.kinesis.sub_sequence_number

    @property
    def position(self) -> str:
        return position_text(self.kinesis.sequence_number, self.kinesis.sub_sequence_number)

    @property
    def event_id(self) -> str:
        return f"{self.shard_id}:{self.position}"

    # ------------------------------------------------------------------------------ its content

    @property
    def partition_key(self) -> str:
        return self.kinesis.partition_key

    @property
    def data(self) -> bytes:
        return self.kinesis.data

    @property
    def approximate_arrival_timestamp(self) -> float:
        return self.kinesis.approximate_arrival_timestamp

    @property
    def approximate_creation_time(self) -> float:
        return self.kinesis.approximate_arrival_timestamp

    @property
    def size_bytes(self) -> int:
        """Data and partition key, as Kinesis counts a record's size."""
        return len(self.kinesis.data) + len(self.kinesis.partition_key.encode())

    @property
    def reloaded(self) -> bool:
        return False  # a reload re-reads a table; a Kinesis stream has none

    @property
    def event_name(self) -> EventName:
        raise RecordFormatError(
            f"shard {self.shard_id}: Kinesis record {self.position} has no DynamoDB event name "
            "(INSERT, MODIFY, REMOVE): drop processing.filter.event_names for a Kinesis source"
        )

    @property
    def stream_view_type(self) -> str | None:
        return None

    @property
    def user_identity(self) -> Mapping[str, Any] | None:
        return None

    @cached_property
    def keys(self) -> dict[str, Any]:
        return {"partitionKey": self.kinesis.partition_key}

    @property
    def typed_keys(self) -> Mapping[str, Any]:
        """The partition key, in the typed form a table's keys have: per-key lanes and parked keys
        keep one partition key's records in order, as Kinesis orders them."""
        return {"partitionKey": {"S": self.kinesis.partition_key}}

    @cached_property
    def new_image(self) -> dict[str, Any] | None:
        return None

    @cached_property
    def old_image(self) -> dict[str, Any] | None:
        return None

    def _raw_sequence_number(self) -> str | None:
        return self.kinesis.sequence_number

    def __repr__(self) -> str:
        return f"KinesisStreamRecord(shard={self.shard_id}, position={self.position})"

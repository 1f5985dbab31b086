"""A leases table written in the Java KCL's Kinesis format, taken up: lease keys (single and
multi-stream), checkpoints with sub-sequence numbers, and the resume rule (read at the checkpoint's
sequence number, drop what is at or below it): nothing at or below a checkpoint is delivered again,
nothing after it is skipped."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.lease_keys import (
    kcl_multi_stream_attributes,
    kinesis_lease_key,
    kinesis_stream_identifier,
    parse_kinesis_lease_key,
    split_lease_key,
)
from consumer.leases.items import lease_from_item, lease_to_item
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.records.kinesis_record import KinesisRecord, after_checkpoint, user_records
from consumer.streams.kinesis_positions import kinesis_resume_position
from consumer.streams.source import Position
from tests.kcl_format import parse_kcl_lease
from tests.kpl_format import User, aggregate

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
SHARD = "shardId-000000000001"


def kcl_item(lease_key: str, checkpoint: str, sub: int) -> dict[str, Any]:
    """A lease as the Java KCL writes it (multi-stream items also carry streamName and shardId)."""
    return {
        "leaseKey": {"S": lease_key},
        "leaseOwner": {"S": "kcl-worker-1"},
        "leaseCounter": {"N": "42"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": str(sub)},
        "parentShardId": {"SS": ["shardId-000000000000"]},
        **kcl_multi_stream_attributes(lease_key),
    }


def test_single_and_multi_stream_keys_are_the_java_kcls() -> None:
    identifier = kinesis_stream_identifier(ARN, 1764214740)
    assert identifier == "123456789012:orders:1764214740"
    multi = kinesis_lease_key(SHARD, identifier)
    assert multi == "123456789012:orders:1764214740:shardId-000000000001"
    assert kinesis_lease_key(SHARD) == SHARD
    assert parse_kinesis_lease_key(multi) == (identifier, SHARD)
    assert parse_kinesis_lease_key(SHARD) == (None, SHARD)
    assert split_lease_key(multi) == (identifier + ":", SHARD)  # the namespace rule the runtime routes by
    assert kcl_multi_stream_attributes(multi) == {"streamName": {"S": identifier}, "shardId": {"S": SHARD}}
    assert kcl_multi_stream_attributes(SHARD) == {}


@pytest.mark.parametrize(
    "lease_key",
    [
        "123456789012:orders:1764214740:shardId-000000000001",  # a Kinesis stream's
        "123456789012:orders:1764214740:shardId-00000001764214740000-1a2b3c4d",  # a table's stream
    ],
)
def test_a_namespaced_lease_is_created_with_the_attributes_a_java_kcl_reads(lease_key: str) -> None:
    """A Java KCL reading a multi-stream table takes each lease's stream and shard from streamName and
    shardId, not from the key: the item this worker creates carries both, as the KCL's own do."""
    item = lease_to_item(Lease(lease_key, None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    identifier, _, shard_id = lease_key.rpartition(":")
    assert item["streamName"] == {"S": identifier} and item["shardId"] == {"S": shard_id}
    assert "streamName" not in lease_to_item(Lease(SHARD, None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    assert lease_from_item(item).shard_id == lease_key


@pytest.mark.parametrize(
    "key",
    [
        "orders:1764214740:shardId-1",
        "12:orders:0:shardId-1",
        "12:or:ders:5:shardId-1",
        "x:orders:5:s",
        "1:o:5:",
    ],
)
def test_a_key_with_a_colon_that_is_not_kcls_form_is_named(key: str) -> None:
    with pytest.raises(ValueError, match="multi-stream form"):
        parse_kinesis_lease_key(key)


def test_stream_identifiers_refuse_what_kcl_refuses() -> None:
    with pytest.raises(ValueError, match="not a Kinesis stream ARN"):
        kinesis_stream_identifier("arn:aws:dynamodb:eu-west-1:123456789012:table/t/stream/2026", 5)
    with pytest.raises(ValueError, match="above 0"):
        kinesis_stream_identifier(ARN, 0)
    with pytest.raises(ValueError, match="colon"):
        kinesis_lease_key("a:b", "1:s:5")


def shard_records() -> tuple[list[dict[str, Any]], list[KinesisRecord]]:
    """GetRecords' records of one shard (plain, aggregated, plain, aggregated) and their user records."""
    aggregates = {
        "49000000000000000000000000000000000000000000000000000200": [
            User(f"k{i}", b"a%d" % i) for i in range(5)
        ],
        "49000000000000000000000000000000000000000000000000000400": [User("z", b"b0"), User("y", b"b1")],
    }
    wire: list[dict[str, Any]] = []
    for index, sequence in enumerate(
        (
            "49000000000000000000000000000000000000000000000000000100",
            "49000000000000000000000000000000000000000000000000000200",
            "49000000000000000000000000000000000000000000000000000300",
            "49000000000000000000000000000000000000000000000000000400",
        )
    ):
        users = aggregates.get(sequence)
        data = aggregate(users) if users else b"plain %d" % index
        wire.append(
            {
                "SequenceNumber": sequence,
                "PartitionKey": "outer",
                "Data": data,
                "ApproximateArrivalTimestamp": 1.5,
            }
        )
    delivered = [user for record in wire for user in user_records(SHARD, record)]
    return wire, delivered


def resume(wire: list[dict[str, Any]], checkpoint: str, sub: int) -> list[tuple[int, int]]:
    """What a worker delivers taking the lease over: read from the checkpoint's position, then filter."""
    position = kinesis_resume_position(checkpoint)
    if position == Position.trim_horizon():
        read = wire
    else:
        assert position.type == "AT_SEQUENCE_NUMBER" and position.sequence_number is not None
        read = [r for r in wire if int(r["SequenceNumber"]) >= int(position.sequence_number)]
    users = [user for record in read for user in user_records(SHARD, record)]
    return [r.extended_sequence_number for r in after_checkpoint(users, checkpoint, sub)]


def test_the_corpus_numbers_user_records_as_kcl_does() -> None:
    _, delivered = shard_records()
    assert [(r.sequence_number[-3:], r.sub_sequence_number, r.aggregated) for r in delivered] == [
        ("100", 0, False),
        *[("200", i, True) for i in range(5)],
        ("300", 0, False),
        ("400", 0, True),
        ("400", 1, True),
    ]
    assert [r.data for r in delivered[1:6]] == [b"a%d" % i for i in range(5)]
    assert delivered[1].partition_key == "k0" and delivered[0].partition_key == "outer"


@pytest.mark.parametrize("layout", ["single", "multi"])
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_a_kcl_checkpoint_is_resumed_exactly_after_itself(layout: str, data: st.DataObject) -> None:
    wire, delivered = shard_records()
    done = data.draw(st.integers(0, len(delivered) - 1))
    at = delivered[done]
    key = (
        SHARD if layout == "single" else kinesis_lease_key(SHARD, kinesis_stream_identifier(ARN, 1764214740))
    )
    item = kcl_item(key, at.sequence_number, at.sub_sequence_number)
    kcl = parse_kcl_lease(item)  # the Java KCL reads the item we describe ...
    ours = lease_from_item(item)  # ... and so do we, to the same checkpoint
    assert (ours.checkpoint.sequence, ours.checkpoint.sub_sequence) == (
        kcl.checkpoint,
        kcl.checkpoint_sub_sequence_number,
    )
    assert parse_kinesis_lease_key(ours.shard_id)[1] == SHARD
    resumed = resume(wire, ours.checkpoint.sequence, ours.checkpoint.sub_sequence)
    assert resumed == [r.extended_sequence_number for r in delivered[done + 1 :]]


def test_sentinel_checkpoints() -> None:
    wire, delivered = shard_records()
    everything = [r.extended_sequence_number for r in delivered]
    assert resume(wire, "TRIM_HORIZON", 0) == everything
    assert resume(wire, "AT_TIMESTAMP", 0) == everything  # the timestamp is the app's setting: lose nothing
    assert kinesis_resume_position("LATEST") == Position.latest()
    assert after_checkpoint(delivered, "SHARD_END") == ()
    with pytest.raises(ValueError, match="finished"):
        kinesis_resume_position("SHARD_END")


def test_boto3_and_wire_forms_give_the_same_user_records() -> None:
    data = aggregate([User("a", b"1"), User("b", b"2")])
    boto = {
        "SequenceNumber": "7",
        "PartitionKey": "p",
        "Data": data,
        "ApproximateArrivalTimestamp": datetime.fromtimestamp(12.5, UTC),
    }
    on_wire = {
        "SequenceNumber": "7",
        "PartitionKey": "p",
        "Data": base64.b64encode(data).decode(),
        "ApproximateArrivalTimestamp": 12.5,
    }
    assert user_records(SHARD, boto) == user_records(SHARD, on_wire)
    assert user_records(SHARD, boto)[1].approximate_arrival_timestamp == 12.5


def test_a_checkpoint_inside_an_aggregate_is_written_as_kcl_reads_it() -> None:
    _, delivered = shard_records()
    inside = delivered[3]  # sub-sequence 2 of the aggregate
    key = kinesis_lease_key(SHARD, kinesis_stream_identifier(ARN, 1764214740))
    lease = Lease(key, "us", 3, ExtendedSequenceNumber(inside.sequence_number, inside.sub_sequence_number))
    kcl = parse_kcl_lease(lease_to_item(lease))
    assert (kcl.lease_key, kcl.checkpoint, kcl.checkpoint_sub_sequence_number) == (
        key,
        inside.sequence_number,
        2,
    )

"""A Java KCL Kinesis lease, taken up over the wire: aggregated and plain records put on the
emulator's Kinesis through boto3, a lease item in KCL's multi-stream format with a checkpoint
inside an aggregate, and the resume (GetShardIterator at the checkpoint, GetRecords, de-aggregation,
the filter) delivers exactly the user records after the checkpoint."""

from __future__ import annotations

import itertools
from typing import Any

from consumer.lease_keys import (
    kcl_multi_stream_attributes,
    kinesis_lease_key,
    kinesis_stream_identifier,
    parse_kinesis_lease_key,
)
from consumer.leases.items import lease_from_item
from consumer.records.kinesis_record import KinesisRecord, after_checkpoint, user_records
from consumer.streams.kinesis_positions import checkpoint_record_gone, kinesis_resume_position
from emulator.testing import RunningEmulator
from tests.kcl_format import kcl_problems
from tests.kpl_format import User, aggregate

_names = itertools.count()


def read_shard(kinesis: Any, name: str, shard_id: str, **position: Any) -> list[KinesisRecord]:
    iterator = kinesis.get_shard_iterator(StreamName=name, ShardId=shard_id, **position)["ShardIterator"]
    found: list[KinesisRecord] = []
    while True:
        answer = kinesis.get_records(ShardIterator=iterator)
        found.extend(user for record in answer["Records"] for user in user_records(shard_id, record))
        iterator = answer.get("NextShardIterator")
        if iterator is None or not answer["Records"]:
            return found


def test_a_kcl_multi_stream_lease_resumes_inside_an_aggregate(emulator: RunningEmulator) -> None:
    kinesis = emulator.client("kinesis")
    name = f"adopt{next(_names)}"
    kinesis.create_stream(StreamName=name, ShardCount=1)
    summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    shard_id = kinesis.list_shards(StreamName=name)["Shards"][0]["ShardId"]
    kinesis.put_record(StreamName=name, PartitionKey="p", Data=b"plain before")
    users = [User(f"user-{i}", b"payload %d" % i) for i in range(6)]
    kinesis.put_record(StreamName=name, PartitionKey="agg", Data=aggregate(users))
    kinesis.put_record(StreamName=name, PartitionKey="p", Data=b"plain after")
    everything = read_shard(kinesis, name, shard_id, ShardIteratorType="TRIM_HORIZON")
    assert [r.data for r in everything] == [b"plain before", *(u.data for u in users), b"plain after"]
    assert [r.partition_key for r in everything[1:7]] == [u.partition_key for u in users]

    checkpointed = everything[3]  # the third user record of the aggregate: sub-sequence 2
    assert (checkpointed.sub_sequence_number, checkpointed.aggregated) == (2, True)
    epoch = int(summary["StreamCreationTimestamp"].timestamp())
    key = kinesis_lease_key(shard_id, kinesis_stream_identifier(summary["StreamARN"], epoch))
    item = {
        "leaseKey": {"S": key},
        "leaseOwner": {"S": "kcl-worker"},
        "leaseCounter": {"N": "9"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "checkpoint": {"S": checkpointed.sequence_number},
        "checkpointSubSequenceNumber": {"N": "2"},
        **kcl_multi_stream_attributes(key),
    }
    assert kcl_problems(item, {key}) == []
    lease = lease_from_item(item)
    _, own_shard = parse_kinesis_lease_key(lease.shard_id)
    position = kinesis_resume_position(lease.checkpoint.sequence)
    read = read_shard(
        kinesis,
        name,
        own_shard,
        ShardIteratorType=position.type,
        StartingSequenceNumber=position.sequence_number,
    )
    resumed = after_checkpoint(read, lease.checkpoint.sequence, lease.checkpoint.sub_sequence)
    assert resumed == tuple(everything[4:])


def test_a_checkpoint_whose_record_retention_removed_is_a_gap(emulator: RunningEmulator) -> None:
    kinesis = emulator.client("kinesis")
    name = f"gone{next(_names)}"
    kinesis.create_stream(StreamName=name, ShardCount=1)
    shard_id = kinesis.list_shards(StreamName=name)["Shards"][0]["ShardId"]
    numbers = [
        kinesis.put_record(StreamName=name, PartitionKey="p", Data=b"%d" % i)["SequenceNumber"]
        for i in range(3)
    ]

    def first_read_at(checkpoint: str) -> str | None:
        position = kinesis_resume_position(checkpoint)
        read = read_shard(
            kinesis,
            name,
            shard_id,
            ShardIteratorType=position.type,
            StartingSequenceNumber=position.sequence_number,
        )
        return read[0].sequence_number if read else None

    assert not checkpoint_record_gone(numbers[1], first_read_at(numbers[1]))
    assert emulator.control.kinesis_trim(name) == 3  # retention removes every record so far
    kinesis.put_record(StreamName=name, PartitionKey="p", Data=b"after")
    assert checkpoint_record_gone(numbers[1], first_read_at(numbers[1]))  # numbers[2] was never read
    assert not checkpoint_record_gone("TRIM_HORIZON", None)

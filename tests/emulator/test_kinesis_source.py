"""The Kinesis adapter (consumer/streams/kinesis.py) on the emulator's Kinesis through boto3: lineage
with two parents, children found at a shard's end, a parents-first reader that loses nothing and keeps
every partition key's order across splits and merges (KPL aggregates among the records), reads paced
within the shard's byte limit, and the port's errors."""

from __future__ import annotations

import itertools
import random
import time
from collections import defaultdict
from typing import Any

import pytest
from botocore.config import Config

from consumer.records.kinesis_record import KinesisRecord
from consumer.streams.errors import ShardNotFoundError, StreamNotFoundError, ThrottledError
from consumer.streams.kinesis import KinesisShard, KinesisStreamSource
from consumer.streams.kinesis_pacing import ReadPace
from consumer.streams.source import Position
from emulator.testing import RunningEmulator
from tests.kpl_format import User, aggregate

_names = itertools.count()


def new_stream(emulator: RunningEmulator, shards: int) -> tuple[Any, KinesisStreamSource, str]:
    client = emulator.client("kinesis")
    name = f"src{next(_names)}"
    client.create_stream(StreamName=name, ShardCount=shards)
    source = KinesisStreamSource(client)
    return client, source, source.describe(name).stream_arn


def read_to_end(
    source: KinesisStreamSource, arn: str, shard: KinesisShard
) -> tuple[list[KinesisRecord], tuple[KinesisShard, ...]]:
    """Every user record of a closed shard, and the children its last answer names."""
    iterator: str | None = source.get_iterator(arn, shard.shard_id, Position.trim_horizon())
    records: list[KinesisRecord] = []
    while iterator is not None:
        batch = source.get_records(iterator, 10_000, shard)
        records.extend(batch.records)
        if batch.shard_ended:
            return records, batch.child_shards
        if not batch.records and shard.is_open:
            return records, ()
        iterator = batch.next_iterator
    raise AssertionError("unreachable")


def test_lineage_with_two_parents_and_children_at_a_shards_end(emulator: RunningEmulator) -> None:
    client, source, arn = new_stream(emulator, shards=2)
    info = source.describe(arn)
    assert info.identifier.startswith("123456789012:") and info.open_shards == 2
    first, second = source.list_shards(arn)
    client.merge_shards(StreamARN=arn, ShardToMerge=first.shard_id, AdjacentShardToMerge=second.shard_id)
    (merged,) = source.list_shards(arn, {"Type": "AT_LATEST"})
    assert merged.parent_shard_ids == (first.shard_id, second.shard_id)
    assert merged.hash_range == (0, 2**128 - 1)
    client.split_shard(StreamARN=arn, ShardToSplit=merged.shard_id, NewStartingHashKey=str(2**127))
    left, right = source.child_shards(arn, merged.shard_id)
    assert (left.parent_shard_ids, right.parent_shard_ids) == ((merged.shard_id,), (merged.shard_id,))
    assert source.child_shards(arn, first.shard_id) == (source.list_shards(arn)[2],)
    closed = source.list_shards(arn)[0]
    _, children = read_to_end(source, arn, closed)
    assert [c.shard_id for c in children] == [merged.shard_id]
    assert children[0].parent_shard_ids == (first.shard_id, second.shard_id)


def test_a_parents_first_reader_keeps_every_keys_order_across_splits_and_merges(
    emulator: RunningEmulator,
) -> None:
    client, source, arn = new_stream(emulator, shards=2)
    rng = random.Random(50)
    written: dict[str, list[bytes]] = defaultdict(list)
    counter = itertools.count()

    def write(count: int) -> None:
        for _ in range(count):
            if rng.random() < 0.2:  # a KPL aggregate of users of one key (the KPL groups by shard)
                key = f"key-{rng.randrange(12)}"
                users = [User(key, b"%d" % next(counter)) for _ in range(rng.randint(1, 4))]
                client.put_record(StreamARN=arn, PartitionKey=key, Data=aggregate(users))
                written[key].extend(u.data for u in users)
            else:
                key, data = f"key-{rng.randrange(12)}", b"%d" % next(counter)
                client.put_record(StreamARN=arn, PartitionKey=key, Data=data)
                written[key].append(data)

    write(40)
    client.update_shard_count(StreamARN=arn, TargetShardCount=4, ScalingType="UNIFORM_SCALING")
    write(40)
    client.update_shard_count(StreamARN=arn, TargetShardCount=2, ScalingType="UNIFORM_SCALING")  # merges
    write(40)
    shards = {s.shard_id: s for s in source.list_shards(arn)}
    assert any(len(s.parent_shard_ids) == 2 for s in shards.values())
    finished: set[str] = set()
    delivered: dict[str, list[bytes]] = defaultdict(list)
    pending = sorted(s for s in shards if not shards[s].parent_shard_ids)
    while pending:
        shard_id = pending.pop(0)
        shard = shards[shard_id]
        assert set(shard.parent_shard_ids) <= finished, f"{shard_id} started before its parents finished"
        records, children = read_to_end(source, arn, shard)
        for record in records:
            delivered[record.partition_key].append(record.data)
        finished.add(shard_id)
        for child in children:
            if set(child.parent_shard_ids) <= finished and child.shard_id not in pending:
                pending.append(child.shard_id)
    assert finished == set(shards)
    assert delivered == written  # nothing lost, nothing twice, each key in its order


def test_reads_paced_by_the_byte_debt_are_never_refused(emulator: RunningEmulator) -> None:
    client, source, arn = new_stream(emulator, shards=1)
    for i in range(16):
        client.put_record(StreamARN=arn, PartitionKey="k", Data=bytes([i]) * 20_000)
    (shard,) = source.list_shards(arn)
    rate = 100_000.0
    emulator.control.set_faults(kinesis_read_bytes_per_second=rate, reads_per_shard_per_second=5)
    try:
        before = emulator.control.counters().get("kinesis_throttled", 0)
        pace, got = ReadPace(), 0
        iterator: str | None = source.get_iterator(arn, shard.shard_id, Position.trim_horizon())
        while got < 16 and iterator is not None:
            time.sleep(pace.wait_ms(time.monotonic() * 1000) / 1000)
            batch = source.get_records(iterator, 4, shard)
            pace = pace.answered(time.monotonic() * 1000, batch.data_bytes, rate)
            got, iterator = got + len(batch.records), batch.next_iterator
        assert got == 16
        assert emulator.control.counters().get("kinesis_throttled", 0) == before
        # The same reads unpaced (and without botocore's retries, which would hide the refusal):
        strict = KinesisStreamSource(
            emulator.client("kinesis", config=Config(retries={"total_max_attempts": 1}))
        )
        unpaced = strict.get_iterator(arn, shard.shard_id, Position.trim_horizon())
        with pytest.raises(ThrottledError, match="ProvisionedThroughputExceededException"):
            for _ in range(3):
                unpaced = strict.get_records(unpaced, 4, shard).next_iterator or unpaced
    finally:
        emulator.control.set_faults(
            kinesis_read_bytes_per_second=2 * 1024 * 1024, reads_per_shard_per_second=1000
        )


def test_errors_are_the_ports(emulator: RunningEmulator) -> None:
    _, source, arn = new_stream(emulator, shards=1)
    with pytest.raises(StreamNotFoundError, match="no such stream"):
        source.describe("no-such-stream")
    with pytest.raises(ShardNotFoundError):
        source.get_iterator(arn, "shardId-000000000099", Position.trim_horizon())
    strict = KinesisStreamSource(emulator.client("kinesis", config=Config(retries={"total_max_attempts": 1})))
    iterator = strict.get_iterator(arn, "shardId-000000000000", Position.latest())
    emulator.control.set_faults(reads_per_shard_per_second=0.01)
    try:
        with pytest.raises(ThrottledError, match="5 reads/s"):
            for _ in range(3):
                iterator = (
                    strict.get_records(iterator, 10, KinesisShard("shardId-000000000000")).next_iterator
                    or iterator
                )
    finally:
        emulator.control.set_faults(reads_per_shard_per_second=1000)

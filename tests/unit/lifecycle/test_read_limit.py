"""The Limit of each GetRecords a shard consumer asks for: worker.max_records, or, unset, the most the
shard's stream serves a call (the reader says: 1000 on DynamoDB Streams, 10 000 on Kinesis), never
more than that; a batch of that many records is full and is followed by the next read at once."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from consumer.streams.dynamodb import MAX_LIMIT as DYNAMODB_MOST
from consumer.streams.kinesis import MAX_LIMIT as KINESIS_MOST
from consumer.streams.kinesis_reader import KinesisShardReader
from consumer.streams.namespace import NamespacedStream, StreamSet
from consumer.streams.reader import ShardReader
from consumer.streams.source import GetRecordsResult
from ground.clock import FakeClock
from ground.settings import WorkerSettings
from tests.unit.lifecycle.fakes import FakeStream, RecordingProcessor
from tests.unit.lifecycle.test_shard_consumer import Rig


@dataclass
class LimitedStream(FakeStream):
    """A stream serving at most ``most`` records a call, recording each fetch's limit."""

    most: int = 10
    limits: list[int] = field(default_factory=list)

    def most_records_per_read(self, shard_id: str) -> int:
        return self.most

    def fetch(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        assert limit <= self.most, f"asked for {limit}, over the stream's {self.most}"
        self.limits.append(limit)
        return super().fetch(shard_id, iterator, limit)


@pytest.mark.parametrize(
    ("max_records", "asked"),
    [(None, 10), (4, 4), (50, 10)],  # unset: the stream's most; fewer: as set; more: the stream's most
)
def test_each_read_asks_for_max_records_or_the_streams_most(max_records: int | None, asked: int) -> None:
    rig = Rig(WorkerSettings(max_records=max_records, idle_time_between_reads_millis=200))
    rig.stream = LimitedStream(most=10)
    rig.stream.add("s1", 100, 25)
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    read_at: list[int] = []  # when each read was made
    for _ in range(500):
        before = rig.stream.fetches
        due = consumer.step()
        read_at += [rig.clock.monotonic_millis()] * (rig.stream.fetches - before)
        if due is None:
            break
        rig.advance(max(0, due - rig.clock.monotonic_millis()))
    assert processor.seen == [r.sequence_number for r in rig.stream.shards["s1"]]
    assert set(rig.stream.limits) == {asked}
    # Every batch but the last is full: the next read follows at once, not after the idle time.
    assert read_at[1:] == [read_at[0]] * (len(read_at) - 1)


def test_a_streams_set_answers_each_shard_with_its_own_streams_most() -> None:
    table = NamespacedStream(ShardReader(object(), "arn:table-stream"), "orders", prefix="orders:")  # type: ignore[arg-type]
    kinesis_reader = KinesisShardReader(object(), "arn:kinesis", FakeClock())  # type: ignore[arg-type]
    kinesis = NamespacedStream(kinesis_reader, "clicks", prefix="123456789012:clicks:1:")
    streams = StreamSet([table, kinesis])
    assert streams.most_records_per_read("orders:shardId-1") == DYNAMODB_MOST == 1000
    assert (
        streams.most_records_per_read("123456789012:clicks:1:shardId-000000000000") == KINESIS_MOST == 10_000
    )
    # A lease of no configured stream is never read: the smallest most, whatever it names.
    assert streams.most_records_per_read("gone:shardId-1") == 1000

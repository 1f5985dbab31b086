"""A Kinesis shard read by the worker's reader (consumer/streams/kinesis_reader.py) on the emulator's
Kinesis, whose shards enforce 5 GetRecords/s and a 2 MiB/s read-byte debt: a 10 000-record answer
(10 MB, Kinesis' most records a call) is waited out before the next read, which is not refused; the
wait counts from the answer's receipt, so parsing it is not added to the wait."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.config import Config

from consumer.streams.errors import ThrottledError
from consumer.streams.kinesis import KinesisShard, KinesisStreamSource
from consumer.streams.kinesis_pacing import READ_BYTES_PER_SECOND
from consumer.streams.kinesis_reader import KinesisShardReader
from emulator.testing import RunningEmulator
from ground.clock import FakeClock, SystemClock
from ground.positions import TRIM_HORIZON

_names = itertools.count()
SHARD = "shardId-000000000000"


@pytest.fixture
def loading(emulator: RunningEmulator) -> Iterator[RunningEmulator]:
    """Writes lifted (loading is not what is tested); the reads' limits put back afterwards."""
    emulator.control.set_faults(kinesis_write_records_per_second=1e9, kinesis_write_bytes_per_second=1e12)
    try:
        yield emulator
    finally:
        emulator.control.set_faults(
            kinesis_write_records_per_second=1000,
            kinesis_write_bytes_per_second=1024 * 1024,
            kinesis_read_bytes_per_second=READ_BYTES_PER_SECOND,
            reads_per_shard_per_second=1000,
        )


def new_stream(emulator: RunningEmulator, sizes: list[int]) -> tuple[Any, str]:
    """A 1-shard stream holding records of ``sizes`` bytes (data + an 8-byte partition key)."""
    client = emulator.client("kinesis")
    name = f"paced{next(_names)}"
    client.create_stream(StreamName=name, ShardCount=1)
    for first in range(0, len(sizes), 500):
        entries = [
            {"Data": b"x" * (size - 8), "PartitionKey": f"k{index:07d}"}
            for index, size in enumerate(sizes[first : first + 500], first)
        ]
        assert client.put_records(StreamName=name, Records=entries).get("FailedRecordCount", 0) == 0
    return client, KinesisStreamSource(client).describe(name).stream_arn


def test_a_10000_record_answer_is_waited_out_and_the_next_read_is_not_refused(
    loading: RunningEmulator,
) -> None:
    _, arn = new_stream(loading, [1024] * 12_000)
    loading.control.set_faults(
        kinesis_read_bytes_per_second=READ_BYTES_PER_SECOND, reads_per_shard_per_second=5
    )
    # botocore's retries off: a refusal is raised, not hidden by a retry.
    strict = KinesisStreamSource(loading.client("kinesis", config=Config(retries={"total_max_attempts": 1})))
    reader = KinesisShardReader(strict, arn, SystemClock())
    limit = reader.most_records_per_read(SHARD)
    first = reader.fetch(SHARD, reader.iterator_at(SHARD, TRIM_HORIZON), limit)
    assert len(first.records) == limit == 10_000  # 10 240 000 bytes: under the 10 MiB a call
    assert first.next_iterator is not None
    # The shard is in debt for its next seconds: read again at once, unpaced, it refuses.
    with pytest.raises(ThrottledError):
        strict.get_records(first.next_iterator, limit, KinesisShard(SHARD))
    refused = loading.control.counters().get("kinesis_throttled", 0)
    second = reader.fetch(SHARD, first.next_iterator, limit)  # waits until the shard earned it back
    assert len(second.records) == 2_000
    assert loading.control.counters().get("kinesis_throttled", 0) == refused


def test_the_wait_counts_from_the_answers_receipt_not_from_the_end_of_its_parse(
    loading: RunningEmulator,
) -> None:
    client, arn = new_stream(loading, [500_000] * 4)
    loading.control.set_faults(kinesis_read_bytes_per_second=1e12)  # only the reader's pacing counts
    clock = FakeClock()
    parse_ms = 300

    def parsed(**_: Any) -> None:  # botocore's after-call comes after its parse: the parse "takes" 300 ms
        clock.advance(parse_ms)

    client.meta.events.register("after-call.kinesis.GetRecords", parsed)
    reader = KinesisShardReader(KinesisStreamSource(client, clock=clock), arn, clock)
    first = reader.fetch(SHARD, reader.iterator_at(SHARD, TRIM_HORIZON), 2)
    assert first.next_iterator is not None
    answered = clock.monotonic_millis()
    reader.fetch(SHARD, first.next_iterator, 2)
    slept = clock.monotonic_millis() - answered - parse_ms
    earned_back = 2 * 500_000 * 1000 / READ_BYTES_PER_SECOND  # 477 ms for the first answer's bytes
    assert slept == pytest.approx(earned_back - parse_ms, abs=1)

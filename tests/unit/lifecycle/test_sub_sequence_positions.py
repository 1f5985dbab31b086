"""KPL aggregates through the delivery path: the user records of one Kinesis record share its sequence
number, so the lifecycle, the runners and the checkpoint order them by position (sequence number,
then sub-sequence number). A checkpoint inside an aggregate is written as the Java KCL writes it
(``checkpoint`` + ``checkpointSubSequenceNumber``), and the consumer the scheduler starts from that
lease resumes inside the aggregate: nothing at or below the checkpoint again, nothing after it lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from consumer.leases.errors import CheckpointRefusedError
from consumer.leases.model import ExtendedSequenceNumber
from consumer.lifecycle.checkpointer import ShardCheckpointer
from consumer.lifecycle.scheduler import Scheduler
from consumer.processing import Batch
from consumer.processing.factory import function_processor
from consumer.records import ShardInfo
from consumer.records.kinesis_record import KinesisRecord
from consumer.records.kinesis_stream_record import KinesisStreamRecord
from consumer.streams.source import GetRecordsResult
from ground.positions import ordinal, position_of, split_position
from tests.unit.lifecycle.test_shard_consumer import SETTINGS, Rig

SHARD = "shardId-000000000000"
AGGREGATE = "49600000000000000000000000000000000000000000000000000100"
PLAIN = "49600000000000000000000000000000000000000000000000000200"


def user(sequence: str, sub: int, key: str) -> KinesisStreamRecord:
    return KinesisStreamRecord(
        KinesisRecord(SHARD, sequence, sub, key, f"{sequence[-3:]}.{sub}".encode(), 1.7e9, aggregated=True)
    )


def shard_records() -> list[KinesisStreamRecord]:
    """One aggregate of seven user records (three partition keys), then a plain record."""
    aggregate = [user(AGGREGATE, sub, f"key-{sub % 3}") for sub in range(7)]
    plain = KinesisStreamRecord(KinesisRecord(SHARD, PLAIN, 0, "key-0", b"plain", 1.7e9))
    return [*aggregate, plain]


@dataclass
class KinesisLikeStream:
    """Reads as Kinesis does: an iterator at a position starts AT its sequence number, so the whole
    aggregate is read again and the consumer must drop what is at or below its checkpoint."""

    records: list[KinesisStreamRecord] = field(default_factory=shard_records)

    def iterator_at(self, shard_id: str, position: str) -> str:
        if position in ("TRIM_HORIZON", "LATEST"):
            return "0" if position == "TRIM_HORIZON" else str(len(self.records))
        sequence, _ = split_position(position)
        return str(next(i for i, r in enumerate(self.records) if int(r.sequence_number) >= int(sequence)))

    def most_records_per_read(self, shard_id: str) -> int:
        return 10_000  # Kinesis'

    def fetch(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        index = int(iterator)
        batch = tuple(self.records[index : index + limit])
        return GetRecordsResult(batch, str(index + len(batch)), 0)


class Recorder:
    def __init__(self) -> None:
        self.handled: list[str] = []

    def __call__(self, batch: Batch) -> None:
        self.handled.extend(r.position for r in batch.records)


def run_until(rig: Rig, consumer_step: object, handled: list[str], count: int) -> None:
    for _ in range(300):
        if len(handled) >= count:
            return
        rig.step(consumer_step)  # type: ignore[arg-type]
    raise AssertionError(f"handled {handled}, expected {count} records")


def test_positions_order_user_records_within_an_aggregate() -> None:
    records = shard_records()
    assert [r.position for r in records[:3]] == [AGGREGATE, f"{AGGREGATE}.1", f"{AGGREGATE}.2"]
    ordinals = [ordinal(r.position) for r in records]
    assert ordinals == sorted(ordinals) and len(set(ordinals)) == len(ordinals)
    assert position_of(ordinals[3]) == f"{AGGREGATE}.3"
    # DynamoDB's records keep their order and their text: sub-sequence 0 is the plain number.
    assert ordinal("200") > ordinal("100.4294967295") > ordinal("100")


def test_a_checkpoint_inside_an_aggregate_is_checked_and_written_with_its_sub_sequence() -> None:
    rig = Rig()
    rig.lease(SHARD)
    rig.coordinator.take_round()
    checkpointer = ShardCheckpointer(SHARD, rig.coordinator, "TRIM_HORIZON")
    checkpointer.delivered(f"{AGGREGATE}.4")
    with pytest.raises(CheckpointRefusedError):
        checkpointer.checkpoint(f"{AGGREGATE}.5")  # beyond what was delivered
    checkpointer.checkpoint(f"{AGGREGATE}.2")
    with pytest.raises(CheckpointRefusedError):
        checkpointer.checkpoint(f"{AGGREGATE}.1")  # behind the last checkpoint
    lease = rig.store.get(SHARD)
    assert lease is not None and lease.checkpoint == ExtendedSequenceNumber(AGGREGATE, 2)
    checkpointer.checkpoint()  # the largest delivered
    lease = rig.store.get(SHARD)
    assert lease is not None and lease.checkpoint == ExtendedSequenceNumber(AGGREGATE, 4)


@pytest.mark.parametrize("lanes", [1, 3])
def test_a_consumer_restarted_from_a_checkpoint_inside_an_aggregate_resumes_inside_it(lanes: int) -> None:
    rig = Rig()
    rig.stream = KinesisLikeStream()  # type: ignore[assignment]
    rig.lease(SHARD)
    first = Recorder()
    handlers = iter([first])

    def processors(shard: ShardInfo) -> object:
        return function_processor(next(handlers), clock=rig.clock, batch_size=3, parallelization_factor=lanes)

    def scheduler() -> Scheduler:
        return Scheduler(
            leases=rig.coordinator,
            reader=rig.stream,  # type: ignore[arg-type]
            processor_factory=processors,  # type: ignore[arg-type]
            settings=SETTINGS,
            clock=rig.clock,
        )

    rig.coordinator.take_round()
    (lease,) = rig.coordinator.held()
    consumer = scheduler().new_consumer(lease)
    # Three user records, checkpointed: the lease stops inside the aggregate.
    rig.stream.records = shard_records()[:3]  # type: ignore[attr-defined]
    run_until(rig, consumer, first.handled, 3)
    rig.step(consumer)
    stored = rig.store.get(SHARD)
    assert stored is not None and stored.checkpoint == ExtendedSequenceNumber(AGGREGATE, 2)

    # A new ownership of the shard (a restart) reads the whole aggregate again, AT its sequence number.
    rig.stream.records = shard_records()  # type: ignore[attr-defined]
    second = Recorder()
    handlers = iter([second])
    restarted = scheduler().new_consumer(stored)
    run_until(rig, restarted, second.handled, 5)
    for _ in range(5):
        rig.step(restarted)
    assert sorted(second.handled, key=ordinal) == [r.position for r in shard_records()[3:]]
    assert len(second.handled) == 5  # nothing at or below (AGGREGATE, 2) again, nothing after it lost

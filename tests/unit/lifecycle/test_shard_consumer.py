"""One shard consumer driven step by step with a fake stream, fake clock and a real coordinator
on the in-memory lease store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.errors import LeaseStoreThrottledError
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.lifecycle.ports import LeaseOps
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.states import ShardState, ShutdownReason
from consumer.processing.api import RecordProcessor
from consumer.processing.factory import windowed_processor
from consumer.processing.window_state import InMemoryWindowStateStore, SavedWindow
from consumer.processing.windows import WindowedBatch
from consumer.records import ShardInfo
from consumer.streams.errors import ExpiredIteratorError, ShardNotFoundError, ThrottledError, TrimmedDataError
from ground.clock import FakeClock
from ground.settings import WorkerSettings
from tests.unit.lifecycle.fakes import FakeStream, FlakyLeases, RecordingProcessor

SETTINGS = WorkerSettings(max_records=100, idle_time_between_reads_millis=200, failover_time_millis=10_000)


class Rig:
    def __init__(self, settings: WorkerSettings = SETTINGS) -> None:
        self.clock = FakeClock()
        self.store = InMemoryLeaseStore()
        self.stream = FakeStream()
        self.settings = settings
        self.coordinator = LeaseCoordinator(self.store, "me", settings, self.clock)
        self.coordinator.heartbeat_once()

    def lease(self, shard: str, parents: tuple[str, ...] = (), checkpoint: str = "TRIM_HORIZON") -> None:
        self.store.create_if_absent(
            Lease(shard, None, 0, ExtendedSequenceNumber(checkpoint), parent_shard_ids=frozenset(parents))
        )

    def consumer(
        self,
        shard: str,
        processor: RecordProcessor,
        parents: tuple[str, ...] = (),
        *,
        leases: LeaseOps | None = None,
        on_shard_end: Callable[[str], None] | None = None,
    ) -> ShardConsumer:
        self.coordinator.take_round()
        lease = next(lease for lease in self.coordinator.held() if lease.shard_id == shard)
        return ShardConsumer(
            ShardInfo(shard, parents),
            lease.checkpoint.sequence,
            leases=leases or self.coordinator,
            reader=self.stream,
            processor=processor,
            settings=self.settings,
            clock=self.clock,
            on_shard_end=on_shard_end,
            counter=lease.counter,  # as the scheduler starts them: bound to this ownership
        )

    def step(self, consumer: ShardConsumer) -> int | None:
        """One step, then let the time it asked for pass; returns what the step returned."""
        due = consumer.step()
        if due is not None:
            self.advance(max(0, due - self.clock.monotonic_millis()))
        return due

    def advance(self, millis: int) -> None:
        """Let time pass while the heartbeat thread keeps beating, as it does in a worker."""
        while millis > 0:
            step = min(millis, self.settings.renewal_interval_millis)
            self.clock.advance(step)
            self.coordinator.heartbeat_once()
            millis -= step

    def drive(self, consumer: ShardConsumer, max_steps: int = 500) -> None:
        for _ in range(max_steps):
            due = consumer.step()
            if due is None:
                return
            self.advance(max(0, due - self.clock.monotonic_millis()))
        raise AssertionError(f"consumer still in {consumer.life.state} after {max_steps} steps")

    def until_delivered(self, consumer: ShardConsumer, processor: RecordingProcessor) -> None:
        while not processor.seen:
            due = consumer.step()
            assert due is not None
            self.advance(max(0, due - self.clock.monotonic_millis()))


def test_reads_a_closed_shard_to_the_end_in_order_and_checkpoints_shard_end() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250)
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    rig.drive(consumer)
    assert processor.seen == [r.sequence_number for r in rig.stream.shards["s1"]]
    assert consumer.life.reason is ShutdownReason.SHARD_END
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("SHARD_END")
    assert processor.events == ["initialize@TRIM_HORIZON", "shard_ended"]


def test_child_waits_for_its_parent() -> None:
    rig = Rig()
    rig.stream.add("parent", 100, 5)
    rig.stream.add("child", 1000, 5)
    rig.lease("parent")
    rig.lease("child", parents=("parent",))
    child = rig.consumer("child", RecordingProcessor(), parents=("parent",))
    for _ in range(3):
        child.step()
        rig.advance(SETTINGS.parent_shard_poll_interval_millis)
    assert child.life.state is ShardState.WAITING_ON_PARENT_SHARDS
    rig.drive(rig.consumer("parent", RecordingProcessor()))
    rig.drive(child)
    assert child.life.reason is ShutdownReason.SHARD_END


def test_a_failing_batch_is_delivered_again_never_skipped() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250)
    rig.lease("s1")
    processor = RecordingProcessor(fail=lambda call, records: call in (2, 3))
    rig.drive(rig.consumer("s1", processor))
    assert processor.seen == [r.sequence_number for r in rig.stream.shards["s1"]]
    assert processor.calls == 3 + 2  # three batches, two of them failed once


def test_expired_iterator_resumes_after_what_was_delivered() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250)
    rig.lease("s1")
    rig.stream.faults["s1"] = [ExpiredIteratorError("expired"), ThrottledError("slow down")]
    processor = RecordingProcessor()
    rig.drive(rig.consumer("s1", processor))
    assert processor.seen == [r.sequence_number for r in rig.stream.shards["s1"]]


def test_trimmed_data_blocks_the_shard_loudly_by_default(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 10)
    rig.lease("s1")
    rig.stream.faults["s1"] = [TrimmedDataError("trimmed")] * 5
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    for _ in range(6):
        due = consumer.step()
        assert due is not None
        rig.advance(due - rig.clock.monotonic_millis())
    assert processor.seen == [] and consumer.life.state is ShardState.PROCESSING
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")
    assert any(r.levelname == "ERROR" for r in caplog.records)


def test_trimmed_data_can_skip_to_trim_horizon_when_told() -> None:
    rig = Rig(SETTINGS.model_copy(update={"on_trimmed": "skip_to_trim_horizon"}))
    rig.stream.add("s1", 100, 10)
    rig.lease("s1")
    rig.stream.faults["s1"] = [TrimmedDataError("trimmed")]
    processor = RecordingProcessor()
    rig.drive(rig.consumer("s1", processor))
    assert len(processor.seen) == 10


def test_trimmed_under_the_checkpoint_at_start_skips_to_trim_horizon_when_told() -> None:
    rig = Rig(SETTINGS.model_copy(update={"on_trimmed": "skip_to_trim_horizon"}))
    rig.stream.add("s1", 100, 10)
    rig.lease("s1")
    rig.stream.iterator_faults["s1"] = [TrimmedDataError("trimmed")]  # from GetShardIterator
    processor = RecordingProcessor()
    rig.drive(rig.consumer("s1", processor))
    assert len(processor.seen) == 10


def test_a_shard_trimmed_away_entirely_is_finished_only_after_it_stayed_missing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = SETTINGS.model_copy(
        update={"on_trimmed": "skip_to_trim_horizon", "shard_sync_interval_millis": 5000}
    )
    rig = Rig(settings)
    rig.stream.add("s1", 100, 10)
    rig.lease("s1")
    rig.stream.iterator_faults["s1"] = [ShardNotFoundError("ResourceNotFoundException")] * 10_000
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    started = rig.clock.monotonic_millis()
    rig.drive(consumer, max_steps=2000)
    assert processor.seen == []
    assert rig.clock.monotonic_millis() - started >= 15_000  # not before three shard-sync intervals
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("SHARD_END")  # its children may start
    assert any(
        getattr(r, "event", None) == "RECORDS_TRIMMED_LOST" or "trimming" in r.getMessage()
        for r in caplog.records
    )


def test_a_missing_shard_stays_stuck_and_loud_by_default(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(SETTINGS.model_copy(update={"shard_sync_interval_millis": 1000}))
    rig.stream.add("s1", 100, 10)
    rig.lease("s1")
    rig.stream.iterator_faults["s1"] = [ShardNotFoundError("ResourceNotFoundException")] * 10_000
    consumer = rig.consumer("s1", RecordingProcessor())
    for _ in range(40):
        due = consumer.step()
        assert due is not None
        rig.advance(due - rig.clock.monotonic_millis())
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")
    assert any(r.levelname == "ERROR" and "trimming" in r.getMessage() for r in caplog.records)


def test_lease_lost_stops_without_checkpointing() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    rig.until_delivered(consumer, processor)  # the first batch is processed and checkpointed
    before = rig.store.get("s1")
    rig.store.take(before, "thief")  # taken behind our back (say we were paused)
    consumer.lease_lost()
    rig.drive(consumer)
    assert consumer.life.reason is ShutdownReason.LEASE_LOST
    assert processor.events[-1] == "lease_lost"
    assert rig.store.get("s1").checkpoint == before.checkpoint


def test_graceful_shutdown_checkpoints_then_releases() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    rig.until_delivered(consumer, processor)
    consumer.request_shutdown()
    rig.drive(consumer)
    lease = rig.store.get("s1")
    assert consumer.life.reason is ShutdownReason.REQUESTED
    assert lease.owner is None and lease.checkpoint == ExtendedSequenceNumber(processor.seen[-1])


def test_a_consumer_stops_when_its_shard_comes_back_after_another_worker_held_it() -> None:
    """The worker is stopped mid-shard (SIGSTOP) past its fence; another worker takes the shard,
    works on it and dies; on resume this worker takes it back before anything tells the old consumer.
    The old consumer must not carry on from its own, older position: that replays what the other
    worker processed (found by the fault model, seed 622 of its long sweep). It stops; the scheduler
    starts a new one from the table's checkpoint."""
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    rig.until_delivered(consumer, processor)
    delivered = len(processor.seen)
    horizon = SETTINGS.failover_time_millis + SETTINGS.max_clock_skew_millis
    rig.clock.advance(horizon + 1)  # stopped: fenced, and dead to the others
    other = LeaseCoordinator(rig.store, "other", SETTINGS, rig.clock)
    assert other.heartbeat_once()
    other.take_round()
    assert [lease.shard_id for lease in other.held()] == ["s1"]
    rig.clock.advance(horizon + 1)  # the other worker dies in turn
    assert rig.coordinator.heartbeat_once()
    rig.coordinator.take_round()  # takes the shard back: a new ownership
    assert rig.coordinator.may_process("s1")
    rig.drive(consumer)
    assert consumer.life.reason is ShutdownReason.LEASE_LOST
    assert len(processor.seen) == delivered, "the old consumer delivered under the new ownership"


def test_a_consumer_carries_on_when_its_untouched_lease_is_taken_back() -> None:
    """Fenced and back before anybody took the lease (the table still shows it at the counter this
    worker held): the take-back continues the same ownership, so the consumer goes on from where it
    was — stopping it would replay the batch it had processed but not yet checkpointed (found by the
    slow-table chaos schedule, seed 2: 7 records delivered twice)."""
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    rig.until_delivered(consumer, processor)
    rig.clock.advance(SETTINGS.fence_after_millis + 1)  # fenced: everything dropped
    assert not rig.coordinator.held()
    assert rig.coordinator.heartbeat_once()
    rig.coordinator.take_round()  # re-adopts: the counter moves, nobody else held it
    for _ in range(5):
        rig.step(consumer)
    assert consumer.life.state is ShardState.PROCESSING
    assert len(processor.seen) == len(set(processor.seen)) == len(rig.stream.shards["s1"])
    assert rig.store.get("s1").checkpoint.sequence == processor.seen[-1]  # type: ignore[union-attr]


def test_a_batch_the_processor_raised_on_is_not_covered_by_a_checkpoint_at_shutdown() -> None:
    """A class-form processor checkpoints ``checkpoint()`` (everything delivered) when told to stop.
    A batch it raised on is delivered again, so it is not "delivered" until then: the graceful stop
    must not record it as done (found by the whole-worker simulator, seed 99 of its first sweep:
    the next owner started after records nobody had processed)."""
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    processor = RecordingProcessor(fail=lambda call, records: call == 2)
    consumer = rig.consumer("s1", processor)
    while processor.calls < 2:
        rig.step(consumer)
    assert len(processor.seen) == SETTINGS.max_records  # the first batch; the second one raised
    consumer.request_shutdown()
    rig.drive(consumer)
    assert consumer.life.reason is ShutdownReason.REQUESTED
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber(processor.seen[-1])


class SaveFailsOnce(InMemoryWindowStateStore):
    """The window-state table refuses one save: the ``fail_at``-th."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.saves, self.fail_at = 0, fail_at

    def save(self, shard_id: str, saved: SavedWindow) -> None:
        self.saves += 1
        if self.saves == self.fail_at:
            raise RuntimeError("window-state table: ProvisionedThroughputExceededException")
        super().save(shard_id, saved)


def test_records_behind_a_deferred_checkpoint_are_not_counted_twice_in_a_window() -> None:
    """A window's state is saved, then its checkpoint is refused for now (a throttled leases table:
    the function form defers it), then a later save of the same flush fails and the flush raises. The
    state goes back to the version saved with the deferred checkpoint, so the batch delivered again
    must start after that checkpoint, not after the one the table holds: the records between were
    counted twice in the window (found by the whole-worker simulator, seeds 234, 235, 249, 257 and 262
    of its first sweep)."""
    rig = Rig()
    rig.stream.add("s1", 100, 6)  # one window, a closed shard
    rig.lease("s1")
    leases = FlakyLeases(rig.coordinator)
    leases.faults["checkpoint"] = [LeaseStoreThrottledError("checkpoint: throttled")] * 2
    finals: list[list[int]] = []

    def count(batch: WindowedBatch) -> dict[str, Any] | None:
        counted = list(batch.state.get("counted", []))
        if batch.window.is_final:
            finals.append(counted)
            return None
        return {"counted": counted + [int(r.sequence_number) for r in batch.records]}

    processor = windowed_processor(
        count, seconds=60, states=SaveFailsOnce(fail_at=2), clock=rig.clock, batch_size=2
    )
    rig.drive(rig.consumer("s1", processor, leases=leases))
    assert finals, "the window was never closed"
    counted = finals[-1]
    assert (
        sorted(counted) == sorted(set(counted)) == [int(r.sequence_number) for r in rig.stream.shards["s1"]]
    )


def test_a_graceful_stop_writes_a_deferred_checkpoint_of_a_batch_that_later_failed() -> None:
    """The function form defers a checkpoint the table refuses for now (its window state saved), then
    a later part of the same flush fails (the next state cannot be saved) and the call raises. The
    records up to the deferred checkpoint stay delivered: the graceful stop that follows writes it and
    releases the lease — it was refused as "beyond the largest sequence number delivered" and the
    stop retried forever (found by the whole-worker simulator, seed 9 005 of its third sweep)."""
    rig = Rig()
    rig.stream.add("s1", 100, 6, closed=False)
    rig.lease("s1")
    leases = FlakyLeases(rig.coordinator)
    leases.faults["checkpoint"] = [LeaseStoreThrottledError("checkpoint: throttled")] * 2
    states = SaveFailsOnce(fail_at=2)

    def count(batch: WindowedBatch) -> dict[str, Any] | None:
        return None if batch.window.is_final else {"n": batch.state.get("n", 0) + len(batch.records)}

    processor = windowed_processor(count, seconds=60, states=states, clock=rig.clock, batch_size=2)
    consumer = rig.consumer("s1", processor, leases=leases)
    while states.saves < 2:
        rig.step(consumer)
    consumer.request_shutdown()
    rig.drive(consumer, max_steps=50)
    lease = rig.store.get("s1")
    assert consumer.life.reason is ShutdownReason.REQUESTED
    second = rig.stream.shards["s1"][1].sequence_number
    assert lease.owner is None and lease.checkpoint == ExtendedSequenceNumber(second)

"""Transient errors outside the fetch path are retried per shard, never raised out of a step.

A throttled or unavailable leases table (the parent check, a checkpoint while shutting down), a
processor whose ``initialize`` or ``lease_lost`` raises, a record with a malformed sequence number:
each one is retried for its shard with back-off. Only a vanished stream / leases table or a settings
error leaves :meth:`ShardConsumer.step` (and ends the worker). The processor hears about a shutdown
only if it was initialized, and ``initialize`` runs once per successful initialization.
"""

from __future__ import annotations

import itertools

import pytest

from consumer.leases.errors import (
    LeaseLostError,
    LeaseStoreThrottledError,
    LeaseStoreUnavailableError,
    LeaseTableMissingError,
)
from consumer.leases.model import ExtendedSequenceNumber
from consumer.lifecycle.failures import backoff_millis, first_malformed, size_bytes
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.states import ShardState, ShutdownReason
from consumer.records import WireRecord
from consumer.streams.errors import StreamGoneError, ThrottledError
from tests.unit.lifecycle.fakes import FlakyLeases, RecordingProcessor, malformed, record
from tests.unit.lifecycle.test_shard_consumer import SETTINGS, Rig


def throttled() -> LeaseStoreThrottledError:
    return LeaseStoreThrottledError("ProvisionedThroughputExceededException")


def steps_until(rig: Rig, consumer: ShardConsumer, state: ShardState, max_steps: int = 100) -> None:
    for _ in range(max_steps):
        if consumer.life.state is state:
            return
        assert rig.step(consumer) is not None
    raise AssertionError(f"consumer still in {consumer.life.state}, not {state}")


def parent_and_child(rig: Rig) -> None:
    """Two shards of five records each, the child leased with the parent as its parent."""
    rig.stream.add("parent", 100, 5)
    rig.stream.add("child", 1000, 5)
    rig.lease("parent")
    rig.lease("child", parents=("parent",))


def sequence(shard: str, seq: int) -> str:
    return record(shard, seq).sequence_number


# ------------------------------------------------------------------------------- back-off


def test_backoff_is_exponential_capped_and_never_below_the_task_backoff() -> None:
    class Top:  # the jitter at its ceiling: shows the exponential envelope
        def uniform(self, low: float, high: float) -> float:
            return high

    ceilings = [backoff_millis(n, 500, Top()) for n in range(1, 12)]  # type: ignore[arg-type]
    assert ceilings[:4] == [1000, 2000, 4000, 8000]
    assert max(ceilings) == 30_000  # capped
    assert all(a <= b for a, b in itertools.pairwise(ceilings))

    class Bottom:
        def uniform(self, low: float, high: float) -> float:
            return low

    assert backoff_millis(5, 500, Bottom()) == 500  # type: ignore[arg-type]


# ----------------------------------------------------------------------- A: parent check


def test_a_throttled_parent_check_is_retried_with_backoff_not_raised() -> None:
    rig = Rig()
    parent_and_child(rig)
    leases = FlakyLeases(rig.coordinator)
    leases.faults["waiting_parents"] = [throttled(), LeaseStoreUnavailableError("timeout"), throttled()]
    processor = RecordingProcessor()
    child = rig.consumer("child", processor, parents=("parent",), leases=leases)
    for _ in range(3):
        now = rig.clock.monotonic_millis()
        due = child.step()  # the old code let the throttle out of the step: the worker exited 1
        assert due is not None and due >= now + SETTINGS.task_backoff_time_millis
        assert child.life.state is ShardState.WAITING_ON_PARENT_SHARDS
        rig.advance(due - now)
    assert leases.pending("waiting_parents") == 0
    assert processor.events == []  # still waiting for its parent
    rig.drive(rig.consumer("parent", RecordingProcessor()))
    rig.drive(child)
    assert processor.seen == [r.sequence_number for r in rig.stream.shards["child"]]
    assert child.life.reason is ShutdownReason.SHARD_END


# ---------------------------------------------------------------- A: checkpoints at shutdown


def test_a_throttled_shard_end_checkpoint_is_retried_until_it_lands() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 5)
    rig.lease("s1")
    leases = FlakyLeases(rig.coordinator)
    ended: list[str] = []
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor, leases=leases, on_shard_end=ended.append)
    steps_until(rig, consumer, ShardState.SHUTTING_DOWN)
    leases.faults["checkpoint"] = [throttled(), throttled(), LeaseStoreUnavailableError("503")]
    for _ in range(3):
        due = rig.step(consumer)  # the old code raised LeaseStoreThrottledError here
        assert due is not None and consumer.life.state is ShardState.SHUTTING_DOWN
        assert rig.store.get("s1").owner == "me"  # still held while the step is retried
    rig.drive(consumer)
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("SHARD_END")
    assert processor.events.count("shard_ended") == 4  # three throttled attempts, then the one that landed
    assert ended == ["s1"]  # children are created once


def test_a_throttled_shard_end_checkpoint_waits_no_longer_than_one_taker_interval() -> None:
    """Five throttles in a row: exponential back-off from 500 ms reached 8-16 s waits, so the shard's
    end (and its children) went through 14 s after a three-second throttle ended. Leases-table
    errors are retried within one taker interval, however long they last."""
    rig = Rig()
    rig.stream.add("s1", 100, 5)
    rig.lease("s1")
    leases = FlakyLeases(rig.coordinator)
    consumer = rig.consumer("s1", RecordingProcessor(), leases=leases)
    steps_until(rig, consumer, ShardState.SHUTTING_DOWN)
    leases.faults["checkpoint"] = [throttled() for _ in range(8)]
    waits = []
    for _ in range(8):
        now = rig.clock.monotonic_millis()
        due = rig.step(consumer)
        assert due is not None
        waits.append(due - now)
    assert max(waits) <= SETTINGS.taker_interval_millis
    rig.drive(consumer)
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("SHARD_END")


def test_a_throttled_checkpoint_in_shutdown_requested_is_retried_while_the_lease_is_held() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    leases = FlakyLeases(rig.coordinator)
    processor = RecordingProcessor(checkpoint_in_process=False)  # progress is checkpointed at the stop
    consumer = rig.consumer("s1", processor, leases=leases)
    rig.until_delivered(consumer, processor)
    consumer.request_shutdown()
    leases.faults["checkpoint"] = [throttled(), throttled()]
    for _ in range(2):
        due = rig.step(consumer)  # the old code raised LeaseStoreThrottledError: `consumer run` exited 1
        assert due is not None and consumer.life.state is ShardState.SHUTTING_DOWN
        lease = rig.store.get("s1")
        assert lease.owner == "me" and lease.checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")
    rig.drive(consumer)
    lease = rig.store.get("s1")
    assert consumer.life.reason is ShutdownReason.REQUESTED
    assert lease.owner is None  # released only after the checkpoint landed
    assert lease.checkpoint == ExtendedSequenceNumber(processor.seen[-1])  # nothing lost, nothing skipped
    assert processor.events.count("shutdown_requested") == 3


def test_a_lease_lost_while_a_shutdown_is_retried_stops_it_without_checkpointing() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    leases = FlakyLeases(rig.coordinator)
    processor = RecordingProcessor(checkpoint_in_process=False)
    consumer = rig.consumer("s1", processor, leases=leases)
    rig.until_delivered(consumer, processor)
    consumer.request_shutdown()
    leases.faults["checkpoint"] = [throttled()]
    assert rig.step(consumer) is not None  # throttled: retried later
    rig.store.take(rig.store.get("s1"), "thief")  # meanwhile another worker took the lease
    consumer.lease_lost()
    rig.drive(consumer)
    assert consumer.life.reason is ShutdownReason.LEASE_LOST
    assert processor.events[-2:] == ["shutdown_requested", "lease_lost"]
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")
    assert rig.store.get("s1").owner == "thief"


def test_lease_lost_error_from_a_shutdown_checkpoint_stops_without_checkpointing_or_releasing() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    leases = FlakyLeases(rig.coordinator)
    processor = RecordingProcessor(checkpoint_in_process=False)
    consumer = rig.consumer("s1", processor, leases=leases)
    rig.until_delivered(consumer, processor)
    consumer.request_shutdown()
    leases.faults["checkpoint"] = [LeaseLostError("checkpoint", "s1", None)]
    rig.drive(consumer)
    assert consumer.life.reason is ShutdownReason.LEASE_LOST
    assert processor.events[-2:] == ["shutdown_requested", "lease_lost"]
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")
    assert leases.calls["release"] == 0


# ------------------------------------------------------------------- A: processor methods


def test_initialize_raising_is_retried_with_backoff_and_logged_with_the_shard_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 5)
    rig.lease("s1")
    processor = RecordingProcessor()
    processor.faults["initialize"] = [RuntimeError("config service down"), RuntimeError("still down")]
    consumer = rig.consumer("s1", processor)
    steps_until(rig, consumer, ShardState.INITIALIZING)
    now = rig.clock.monotonic_millis()
    due = consumer.step()  # the old code let the processor's error out: the worker exited
    assert due is not None and due >= now + SETTINGS.task_backoff_time_millis
    rig.advance(due - now)
    rig.drive(consumer)
    assert processor.events.count("initialize@TRIM_HORIZON") == 3
    assert processor.seen == [r.sequence_number for r in rig.stream.shards["s1"]]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("s1" in m and "initialize" in m and "config service down" in m for m in errors)


def test_lease_lost_raising_is_logged_and_the_consumer_still_shuts_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 250, closed=False)
    rig.lease("s1")
    processor = RecordingProcessor()
    processor.faults["lease_lost"] = [RuntimeError("cannot drop my buffer")]
    consumer = rig.consumer("s1", processor)
    rig.until_delivered(consumer, processor)
    before = rig.store.get("s1")
    rig.store.take(before, "thief")
    consumer.lease_lost()
    rig.drive(consumer)  # the old code raised RuntimeError out of the step
    assert consumer.finished and consumer.life.reason is ShutdownReason.LEASE_LOST
    assert processor.events.count("lease_lost") == 1
    assert rig.store.get("s1").checkpoint == before.checkpoint
    assert any(
        r.levelname == "ERROR" and "s1" in r.getMessage() and "lease_lost" in r.getMessage()
        for r in caplog.records
    )


# ---------------------------------------------------------- A: malformed sequence numbers


def test_a_malformed_sequence_number_stops_the_shard_before_it_loudly_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig(SETTINGS.model_copy(update={"max_records": 5}))
    rig.stream.add("s1", 100, 12)  # 100, 110, ..., 210; closed
    bad = malformed("s1", 150, "15O")  # letter O: not digits
    good = rig.stream.shards["s1"][5]
    rig.stream.shards["s1"][5] = bad
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    delays = []
    for _ in range(12):
        now = rig.clock.monotonic_millis()
        due = consumer.step()  # the old code raised RecordFormatError out of the step
        assert due is not None
        delays.append(due - now)
        rig.advance(due - now)
    first_five = [sequence("s1", s) for s in range(100, 150, 10)]
    assert processor.seen == first_five  # everything before it was processed...
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber(first_five[-1])  # ...and checkpointed
    assert consumer.life.state is ShardState.PROCESSING  # stuck before it, not past it, not dead
    assert max(delays[-3:]) >= SETTINGS.task_backoff_time_millis  # retried with back-off, not spinning
    stuck = [r.getMessage() for r in caplog.records if r.levelname == "ERROR" and "stuck" in r.getMessage()]
    assert stuck and all("s1" in m and "s1-150" in m and "15O" in m for m in stuck)
    rig.stream.shards["s1"][5] = good  # the read comes back well (or an operator repaired the source)
    rig.drive(consumer)
    assert processor.seen == [r.sequence_number for r in rig.stream.shards["s1"]]  # every record, once
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("SHARD_END")


def test_a_malformed_first_record_is_never_delivered_nor_checkpointed() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 3)
    rig.stream.shards["s1"].insert(0, malformed("s1", 90))
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    for _ in range(8):
        assert rig.step(consumer) is not None
    assert processor.seen == [] and processor.calls == 0
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")


# ------------------------------------------------------------------- what stays fatal


def test_a_vanished_stream_or_leases_table_still_leaves_the_step() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 5)
    rig.stream.add("child", 1000, 5)
    rig.lease("s1")
    rig.lease("child", parents=("s1",))
    rig.stream.faults["s1"] = [StreamGoneError("table deleted")]
    with pytest.raises(StreamGoneError):
        rig.drive(rig.consumer("s1", RecordingProcessor()))
    leases = FlakyLeases(rig.coordinator)
    leases.faults["waiting_parents"] = [LeaseTableMissingError("leases table gone")]
    with pytest.raises(LeaseTableMissingError):
        rig.consumer("child", RecordingProcessor(), parents=("s1",), leases=leases).step()


# ------------------------------------------------------------- B: initialize exactly once


def test_initialize_is_called_once_when_getting_the_iterator_is_throttled() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 5)
    rig.lease("s1")
    rig.stream.iterator_faults["s1"] = [ThrottledError("slow down"), ThrottledError("slow down")]
    processor = RecordingProcessor()
    rig.drive(rig.consumer("s1", processor))
    assert processor.events == ["initialize@TRIM_HORIZON", "shard_ended"]
    assert len(processor.seen) == 5


# ------------------------------------------------ C: an uninitialized processor is not told


def test_a_graceful_stop_while_waiting_on_parents_releases_without_calling_the_processor() -> None:
    rig = Rig()
    parent_and_child(rig)
    processor = RecordingProcessor()
    child = rig.consumer("child", processor, parents=("parent",))
    for _ in range(2):
        rig.step(child)
    assert child.life.state is ShardState.WAITING_ON_PARENT_SHARDS
    child.request_shutdown()
    rig.drive(child)
    assert child.life.reason is ShutdownReason.REQUESTED
    assert processor.events == []  # never initialized: no shutdown_requested
    assert rig.store.get("child").owner is None  # the lease is simply released
    assert rig.store.get("child").checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")


def test_a_lease_lost_while_waiting_on_parents_does_not_call_the_processor() -> None:
    rig = Rig()
    parent_and_child(rig)
    processor = RecordingProcessor()
    child = rig.consumer("child", processor, parents=("parent",))
    rig.step(child)
    child.lease_lost()
    rig.drive(child)
    assert child.life.reason is ShutdownReason.LEASE_LOST
    assert processor.events == []


def test_a_stop_while_initialize_keeps_failing_does_not_tell_the_processor() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 5, closed=False)
    rig.lease("s1")
    processor = RecordingProcessor()
    processor.faults["initialize"] = [RuntimeError("down")] * 100
    consumer = rig.consumer("s1", processor)
    steps_until(rig, consumer, ShardState.INITIALIZING)
    rig.step(consumer)
    rig.step(consumer)
    consumer.request_shutdown()
    rig.drive(consumer)
    assert set(processor.events) == {"initialize@TRIM_HORIZON"}  # no shutdown_requested
    assert rig.store.get("s1").owner is None


def test_held_records_are_well_formed_by_construction_and_the_others_are_still_searched() -> None:
    """A batch of held records (WireRecord: sequence number checked when held) is answered at once;
    any other record in it is looked at, and a SizeBytes that does not read counts 0."""
    raws = [dict(record("s1", seq).raw) for seq in (100, 110, 120)]
    held = tuple(WireRecord.from_parsed(raw, "s1") for raw in raws)
    assert {type(r) for r in held} == {WireRecord}
    assert first_malformed(held) is None and first_malformed(()) is None
    assert first_malformed((*held[:2], malformed("s1", 115), held[2])) == 2
    assert first_malformed((*held, record("s1", 130))) is None  # well formed, though not held
    sizes = sum(raw["dynamodb"]["SizeBytes"] for raw in raws)
    assert size_bytes(held) == sizes
    odd = record("s1", 140)
    odd.raw["dynamodb"]["SizeBytes"] = "many"
    assert size_bytes((*held, odd)) == sizes

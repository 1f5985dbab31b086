"""Tumbling windows: state carried batch to batch and saved with each checkpoint, final calls at the
window's end and at shard end, resumed by the next owner from the version its checkpoint names."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from consumer.leases.errors import LeaseStoreThrottledError
from consumer.processing import (
    InitializationInput,
    LeaseLostError,
    LeaseLostInput,
    ProcessingConfigError,
    ProcessRecordsInput,
    ShardEndedInput,
)
from consumer.processing.dead_letter import LocalDeadLetter
from consumer.processing.factory import windowed_processor
from consumer.processing.retry import RetryPolicy
from consumer.processing.window_state import InMemoryWindowStateStore
from consumer.processing.windows import WindowedBatch, WindowStateTooLargeError
from consumer.records import ShardInfo, StreamRecord
from consumer.runtime.processors import ProcessingClients, build_processor_factory
from examples.windowed_counter import WindowedCounter
from ground.clock import FakeClock
from tests.unit.processing.helpers import SHARD, WatchingCheckpointer, record
from tests.unit.processing.test_factory import make_settings

INFO = ShardInfo(SHARD)
T0 = 1_700_000_000.0  # a multiple of 10: windows of 10 s start here


def stream(count: int, per_second: float = 2.0) -> list[StreamRecord]:
    """``count`` records, ``per_second`` of them per second from T0."""
    return [record(seq, created=T0 + (seq - 1) / per_second) for seq in range(1, count + 1)]


def expected_counts(records: list[StreamRecord], seconds: int) -> dict[float, int]:
    counts: Counter[float] = Counter()
    for r in records:
        counts[float(int(r.approximate_creation_time // seconds) * seconds)] += 1
    return dict(counts)


def finals_by_window(counter: WindowedCounter) -> dict[float, int]:
    found: dict[float, int] = {}
    for final in counter.finals:
        # A repeated final call (after a crash) must repeat the same figure.
        assert found.get(final["windowStart"], final["records"]) == final["records"]
        found[final["windowStart"]] = final["records"]
    return found


def deliver(processor: Any, checkpointer: WatchingCheckpointer, chunk: list[StreamRecord], **kw: Any) -> None:
    checkpointer.deliver(tuple(chunk))
    processor.process_records(ProcessRecordsInput(tuple(chunk), checkpointer, 0, INFO, **kw))


def test_state_is_carried_and_every_window_is_final_once_including_at_shard_end() -> None:
    records = stream(50)  # 25 s: windows at T0, T0+10, T0+20
    counter = WindowedCounter()
    store = InMemoryWindowStateStore()
    processor = windowed_processor(counter.handle, seconds=10, states=store, clock=FakeClock())
    checkpointer = WatchingCheckpointer(lambda: set(range(1, 51)))
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    for first in range(0, 50, 7):
        deliver(processor, checkpointer, records[first : first + 7])
    assert finals_by_window(counter) == {T0: 20, T0 + 10: 20}  # the third is still open
    saved = store.load(SHARD, checkpointer.last_checkpoint)
    assert saved is not None and saved.state["records"] == 10 and saved.window_start == T0 + 20
    assert len(store.versions(SHARD)) <= 2  # the last two versions only
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(INFO, checkpointer))
    assert finals_by_window(counter) == expected_counts(records, 10)
    assert counter.finals[-1]["shardEnded"] is True
    assert checkpointer.last_checkpoint == "SHARD_END" and store.versions(SHARD) == []


def test_a_new_owner_resumes_the_state_saved_with_the_checkpoint_not_a_later_one() -> None:
    """The first owner saves a state with a checkpoint the table then refuses (the lease was lost):
    the next owner resumes from the previous checkpoint's version, so nothing counts twice."""
    records = stream(40)
    counter = WindowedCounter()
    store = InMemoryWindowStateStore()
    first = windowed_processor(counter.handle, seconds=10, states=store, clock=FakeClock())
    checkpointer = WatchingCheckpointer(lambda: set(range(1, 41)))
    first.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    deliver(first, checkpointer, records[:13])
    resume = checkpointer.last_checkpoint
    checkpointer.lose_lease()  # the next checkpoint fails after its state was written
    with pytest.raises(LeaseLostError):
        deliver(first, checkpointer, records[13:17])
    first.lease_lost(LeaseLostInput(INFO))
    assert any(int(v) == 17 for v in store.versions(SHARD))  # written, never checkpointed

    second = windowed_processor(counter.handle, seconds=10, states=store, clock=FakeClock())
    taker = WatchingCheckpointer(lambda: set(range(1, 41)))
    taker.last_checkpoint = resume
    second.initialize(InitializationInput(INFO, resume))
    # The stray version stays (nobody reads it; it may as well have been a newer owner's, see the
    # next test): shard end deletes it with the rest.
    assert {int(v) for v in store.versions(SHARD)} >= {int(resume), 17}
    deliver(second, taker, records[13:])
    taker.at_shard_end = True
    second.shard_ended(ShardEndedInput(INFO, taker))
    assert finals_by_window(counter) == expected_counts(records, 10)
    assert store.versions(SHARD) == []


def test_retries_bisection_and_dead_letters_never_count_a_record_twice(tmp_path: Path) -> None:
    records = stream(30)
    poison = {7, 22}
    seen_failures = Counter[int]()
    counter = WindowedCounter()

    def flaky(batch: WindowedBatch) -> dict[str, Any]:
        for r in batch.records:
            seq = int(r.sequence_number)
            if seq in poison:
                raise ValueError(f"poison {seq}")
            if seq % 5 == 0 and seen_failures[seq] < 1:
                seen_failures[seq] += 1
                raise RuntimeError(f"transient {seq}")
        return counter.handle(batch)

    processor = windowed_processor(
        flaky,
        seconds=10,
        clock=FakeClock(),
        policy=RetryPolicy(
            max_retry_attempts=1, base_backoff_millis=1, max_backoff_millis=2, rng=random.Random(4)
        ),
        dead_letter=LocalDeadLetter(tmp_path),
        batch_size=8,
    )
    checkpointer = WatchingCheckpointer(lambda: set(range(1, 31)))
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    deliver(processor, checkpointer, records)
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(INFO, checkpointer))
    survivors = [r for r in records if int(r.sequence_number) not in poison]
    assert finals_by_window(counter) == expected_counts(survivors, 10)


def test_an_idle_caught_up_shard_closes_its_window_after_the_end() -> None:
    clock = FakeClock(start_millis=int(T0 * 1000))
    counter = WindowedCounter()
    processor = windowed_processor(counter.handle, seconds=10, clock=clock)
    checkpointer = WatchingCheckpointer(lambda: set(range(1, 6)))
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    deliver(processor, checkpointer, stream(4))
    deliver(processor, checkpointer, [])
    assert counter.finals == []
    clock.advance(11_000)  # past the end, within the grace: a record written at 9.9 s may still come
    deliver(processor, checkpointer, [])
    assert counter.finals == []
    clock.advance(2_000)
    deliver(processor, checkpointer, [])
    deliver(processor, checkpointer, [])
    assert finals_by_window(counter) == {T0: 4} and len(counter.finals) == 1
    late = record(5, created=T0 + 9)  # belongs to the closed window: it counts in the next one
    deliver(processor, checkpointer, [late])
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(INFO, checkpointer))
    assert finals_by_window(counter) == {T0: 4, T0 + 10: 1}


def test_a_state_over_the_limit_fails_the_batch_naming_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    calls = Counter[str]()

    def hoard(batch: WindowedBatch) -> dict[str, Any]:
        calls["calls"] += 1
        return {"records": [r.sequence_number for r in batch.records] * 100}

    processor = windowed_processor(
        hoard,
        seconds=10,
        clock=FakeClock(),
        max_state_bytes=1024,
        policy=RetryPolicy(bisect_on_error=False, base_backoff_millis=1, max_backoff_millis=1),
    )
    checkpointer = WatchingCheckpointer(set)
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    deliver(processor, checkpointer, stream(5), should_stop=lambda: calls["calls"] >= 2)
    assert checkpointer.history == []  # never checkpointed past records whose state could not be kept
    assert "processing.max_window_state_bytes (1024)" in caplog.text
    assert WindowStateTooLargeError.__name__ in caplog.text


@pytest.mark.parametrize(
    ("processing", "message"),
    [
        (
            {"processor": "examples.windowed_counter:WindowedCounter", "tumbling_window_seconds": 60,
             "parallelization_factor": 4},
            "cannot be combined",
        ),
        ({"processor": "changelog", "options": {"destination": "x"}, "tumbling_window_seconds": 60}, "does not aggregate"),
        (
            {"processor": "examples.class_form:AuditTrail", "tumbling_window_seconds": 60},
            "processing.tumbling_window_seconds",
        ),
        ({"processor": "examples.class_form:AuditTrail", "parallelization_factor": 2}, "parallelization_factor"),
        ({"processor": "examples.windowed_counter:WindowedCounter", "tumbling_window_seconds": 60}, "DynamoDB client"),
    ],
)  # fmt: skip
def test_settings_that_cannot_work_fail_at_start_up(processing: dict[str, Any], message: str) -> None:
    with pytest.raises(ProcessingConfigError, match=message):
        build_processor_factory(make_settings(**processing))


def test_the_settings_bound_the_factor_and_the_window() -> None:
    for bad in (
        {"parallelization_factor": 11},
        {"parallelization_factor": 0},
        {"tumbling_window_seconds": 901},
    ):
        with pytest.raises(ValueError):
            make_settings(**bad)


def test_a_windowed_processor_is_built_from_the_settings_with_the_table_store() -> None:
    settings = make_settings(
        processor="examples.windowed_counter:WindowedCounter", tumbling_window_seconds=60
    )
    store = InMemoryWindowStateStore()
    factory = build_processor_factory(settings, clients=ProcessingClients(window_states=store))
    processor = factory(INFO)
    checkpointer = WatchingCheckpointer(lambda: {1, 2})
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    checkpointer.deliver((record(1), record(2)))
    processor.process_records(ProcessRecordsInput((record(1), record(2)), checkpointer, 0, INFO))
    saved = store.load(SHARD, checkpointer.last_checkpoint)
    assert saved is not None and saved.state == {"records": 2, "INSERT": 2}
    assert settings.window_state_table_name == "orders-consumer-window-state"


def test_a_state_that_cannot_be_saved_rolls_back_so_the_redelivery_does_not_count_twice() -> None:
    class FlakyStore(InMemoryWindowStateStore):
        def __init__(self) -> None:
            super().__init__()
            self.saves = 0

        def save(self, shard_id: str, saved: Any) -> None:
            self.saves += 1
            if self.saves == 2:
                raise RuntimeError("window-state table throttled")
            super().save(shard_id, saved)

    records = stream(12)
    counter = WindowedCounter()
    processor = windowed_processor(
        counter.handle, seconds=10, states=FlakyStore(), clock=FakeClock(), batch_size=4
    )
    checkpointer = WatchingCheckpointer(lambda: set(range(1, 13)))
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    with pytest.raises(RuntimeError, match="throttled"):
        deliver(processor, checkpointer, records)
    # The lifecycle delivers what is after the checkpoint again.
    again = [r for r in records if int(r.sequence_number) > int(checkpointer.last_checkpoint)]
    deliver(processor, checkpointer, again)
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(INFO, checkpointer))
    assert finals_by_window(counter) == expected_counts(records, 10)


def test_the_window_state_table_is_created_locally_only_when_windows_are_on() -> None:
    from tools.local_aws import configured_tables

    names = {spec.name: spec for spec in configured_tables(make_settings(tumbling_window_seconds=60))}
    spec = names["orders-consumer-window-state"]
    assert (spec.partition_key.name, spec.sort_key and spec.sort_key.name) == ("shard", "sequence")
    assert "orders-consumer-window-state" not in {s.name for s in configured_tables(make_settings())}


def test_a_missing_window_state_table_fails_at_start_up() -> None:
    class NoTable:
        def describe_table(self, TableName: str) -> None:  # noqa: N803 - boto3's spelling
            raise RuntimeError(f"ResourceNotFoundException: {TableName}")

    settings = make_settings(
        processor="examples.windowed_counter:WindowedCounter", tumbling_window_seconds=60
    )
    with pytest.raises(ProcessingConfigError, match="orders-consumer-window-state.*consumer local up"):
        build_processor_factory(settings, clients=ProcessingClients(dynamodb=NoTable()))


class ThrottledAfterFirst(WatchingCheckpointer):
    """The leases table takes the first checkpoint and refuses the rest for now (throttled)."""

    def __init__(self, finished: Any) -> None:
        super().__init__(finished)
        self.written = 0

    def checkpoint(self, sequence_number: str | None = None) -> None:
        if self.written:
            raise LeaseStoreThrottledError("checkpoint: throttled")
        super().checkpoint(sequence_number)
        self.written += 1


def test_while_checkpoints_are_refused_the_version_the_table_names_is_kept_for_the_next_owner() -> None:
    """The function form defers a checkpoint the table refuses for now; the versions saved after the
    last one written must not push out the one the table names, which is where the next owner
    resumes: it found none, started its window empty, and the records before lost their count (found
    by the whole-worker simulator, seeds 418 and 834 of its first sweep)."""
    records = stream(12)  # one window of 10 s
    store = InMemoryWindowStateStore()
    counter = WindowedCounter()
    processor = windowed_processor(counter.handle, seconds=10, states=store, clock=FakeClock(), batch_size=2)
    checkpointer = ThrottledAfterFirst(lambda: set(range(1, 13)))
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    deliver(processor, checkpointer, records)
    table = checkpointer.last_checkpoint
    assert int(table) == 2 and checkpointer.written == 1
    saved = store.load(SHARD, table)
    assert saved is not None and saved.state["records"] == 2, "the version the table names is gone"
    successor = WindowedCounter()
    after = windowed_processor(successor.handle, seconds=10, states=store, clock=FakeClock())
    after.initialize(InitializationInput(INFO, table))
    resumed = WatchingCheckpointer(lambda: set(range(1, 13)))
    resumed.last_checkpoint = table
    deliver(after, resumed, records[2:])
    resumed.at_shard_end = True
    after.shard_ended(ShardEndedInput(INFO, resumed))
    assert finals_by_window(successor) == {T0: 12}


def test_an_owner_that_initializes_late_keeps_a_newer_owners_window_state() -> None:
    """A worker takes the shard at checkpoint 2 and is stopped while it initializes; meanwhile another
    takes it over and saves its window state as of 4. When the first one resumes (a zombie), starting
    must not delete that version: the next owner resumes from it (found by the whole-worker
    simulator, seed 6 174 of its third sweep: the next owner's window started empty)."""
    records = stream(6)
    store = InMemoryWindowStateStore()
    first = windowed_processor(WindowedCounter().handle, seconds=10, states=store, clock=FakeClock())
    checkpointer = WatchingCheckpointer(lambda: set(range(1, 7)))
    first.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    deliver(first, checkpointer, records[:2])  # saves and checkpoints 2
    newer = windowed_processor(WindowedCounter().handle, seconds=10, states=store, clock=FakeClock())
    newer.initialize(InitializationInput(INFO, checkpointer.last_checkpoint))
    deliver(newer, checkpointer, records[2:4])  # the newer owner saves 4
    saved_at_four = checkpointer.last_checkpoint
    zombie = windowed_processor(WindowedCounter().handle, seconds=10, states=store, clock=FakeClock())
    zombie.initialize(InitializationInput(INFO, records[1].sequence_number))  # starts late, from 2
    saved = store.load(SHARD, saved_at_four)
    assert saved is not None and saved.state["records"] == 4, "the newer owner's window state is gone"

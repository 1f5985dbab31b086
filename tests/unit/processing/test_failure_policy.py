"""Failure injection: nothing lost, poison records dead-lettered with their error, the rest in
order, checkpoints never ahead of what succeeded."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.processing import (
    Batch,
    BatchResult,
    LeaseLostError,
    NonRetryableError,
    ProcessRecordsInput,
    function_processor,
)
from consumer.processing.dead_letter import LocalDeadLetter
from consumer.processing.function_processor import FunctionProcessor
from consumer.processing.retry import RetryPolicy
from consumer.records import ShardInfo, StreamRecord
from consumer.sinks.changelog import ChangelogSink, ChangelogStore
from ground.clock import FakeClock
from tests.unit.processing.helpers import SHARD, ScriptedHandler, WatchingCheckpointer, records


class RecordingMetrics:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        self.counts[f"gauge:{name}"] = value

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        key = f"{name_prefix}.{'Success' if success else 'Failure'}"
        self.counts[key] = self.counts.get(key, 0) + 1


def policy(**kwargs: Any) -> RetryPolicy:
    defaults: dict[str, Any] = {"base_backoff_millis": 10, "max_backoff_millis": 100, "rng": random.Random(3)}
    return RetryPolicy(**{**defaults, **kwargs})


def drive(
    processor: FunctionProcessor,
    checkpointer: WatchingCheckpointer,
    batches: list[tuple[StreamRecord, ...]],
    should_stop: Callable[[], bool] = lambda: False,
    lease_held: Callable[[], bool] = lambda: True,
) -> None:
    for batch in batches:
        checkpointer.deliver(batch)
        processor.process_records(
            ProcessRecordsInput(batch, checkpointer, 0, ShardInfo(SHARD), should_stop, lease_held)
        )


def dead_lettered(directory: Path) -> dict[int, str]:
    found: dict[int, str] = {}
    for document in LocalDeadLetter(directory).read_all():
        for raw in document["records"]:
            found[int(raw["dynamodb"]["SequenceNumber"])] = document["error"]["message"]
    return found


def test_every_third_call_failing_loses_nothing_and_keeps_order() -> None:
    clock = FakeClock()
    handler = ScriptedHandler(every=3)
    metrics = RecordingMetrics()
    processor = function_processor(handler, clock=clock, policy=policy(), metrics=metrics)
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded))
    drive(processor, checkpointer, [records(1, 10), records(11, 20), records(21, 25)])
    assert handler.succeeded == list(range(1, 26))
    assert checkpointer.last_checkpoint == str(25).zfill(21)
    assert metrics.counts["RecordsRetried"] >= 1


def test_poison_record_goes_to_the_dead_letter_with_its_error(tmp_path: Path) -> None:
    clock = FakeClock()
    handler = ScriptedHandler(poison={7})
    dead = LocalDeadLetter(tmp_path)
    metrics = RecordingMetrics()
    processor = function_processor(
        handler, clock=clock, policy=policy(max_retry_attempts=2), dead_letter=dead, metrics=metrics
    )
    finished = lambda: set(handler.succeeded) | set(dead_lettered(tmp_path))  # noqa: E731
    checkpointer = WatchingCheckpointer(finished)
    drive(processor, checkpointer, [records(1, 16)])
    assert dead_lettered(tmp_path) == {7: "cannot take record 7"}
    assert handler.succeeded == [s for s in range(1, 17) if s != 7]
    assert checkpointer.last_checkpoint == str(16).zfill(21)
    assert metrics.counts["RecordsSentToDeadLetter"] == 1
    (document,) = dead.read_all()
    assert document["attempts"] == 3 and document["error"]["type"] == "PoisonError"
    assert document["shardId"] == SHARD


def test_non_retryable_errors_skip_the_retries(tmp_path: Path) -> None:
    handler = ScriptedHandler(poison={3}, poison_error=NonRetryableError)
    processor = function_processor(
        handler, clock=FakeClock(), policy=policy(), dead_letter=LocalDeadLetter(tmp_path)
    )
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded) | set(dead_lettered(tmp_path)))
    drive(processor, checkpointer, [records(1, 4)])
    assert set(dead_lettered(tmp_path)) == {3}
    (document,) = LocalDeadLetter(tmp_path).read_all()
    assert document["attempts"] == 1


def test_default_policy_never_skips_a_poison_record_and_says_which_shard_is_stuck(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    start = clock.monotonic_millis()
    handler = ScriptedHandler(poison={5})
    metrics = RecordingMetrics()
    processor = function_processor(handler, clock=clock, policy=policy(), metrics=metrics)
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded))
    stop = lambda: clock.monotonic_millis() - start > 5_000  # noqa: E731  (an operator steps in)
    with caplog.at_level(logging.ERROR, logger="consumer.processing"):
        drive(processor, checkpointer, [records(1, 8)], stop)
    assert handler.succeeded == [1, 2, 3, 4]
    assert checkpointer.last_checkpoint == str(4).zfill(21)
    assert [int(r.sequence_number) for r in processor.buffered] == [5, 6, 7, 8]
    stuck = [r.getMessage() for r in caplog.records if "stuck" in r.getMessage()]
    assert stuck and SHARD in stuck[-1] and "cannot take record 5" in stuck[-1]
    assert metrics.counts["RecordsRetried"] >= 2


def test_partial_batch_failure_checkpoints_just_before_the_lowest_failure() -> None:
    seen: list[list[int]] = []

    def handle(batch: Batch) -> BatchResult | None:
        numbers = [int(r.sequence_number) for r in batch.records]
        seen.append(numbers)
        if len(seen) == 1:
            return BatchResult.failed(batch.records[3], batch.records[6], error="index refused")
        return None

    checkpointer = WatchingCheckpointer(lambda: {s for call in seen[1:] for s in call} | {1, 2, 3})
    processor = function_processor(handle, clock=FakeClock(), policy=policy(bisect_on_error=False))
    drive(processor, checkpointer, [records(1, 8)])
    assert seen == [[1, 2, 3, 4, 5, 6, 7, 8], [4, 5, 6, 7, 8]]
    assert checkpointer.history == [str(3).zfill(21), str(8).zfill(21)]


def test_slow_processor_that_outlives_its_lease_never_checkpoints_past_it() -> None:
    clock = FakeClock()
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded))

    def slow(batch: Batch) -> None:
        clock.advance(20_000)  # longer than the failover time: the lease is gone meanwhile
        checkpointer.lose_lease()

    handler = ScriptedHandler(on_call=slow)
    processor = function_processor(handler, clock=clock, policy=policy())
    with pytest.raises(LeaseLostError):
        drive(processor, checkpointer, [records(1, 5)], lambda: not checkpointer.lease_held)
    assert checkpointer.history == []


def test_should_stop_interrupts_the_back_off_without_checkpointing() -> None:
    clock = FakeClock()
    handler = ScriptedHandler(poison={1})
    stops = iter([False, False, True])
    processor = function_processor(handler, clock=clock, policy=policy(base_backoff_millis=60_000))
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded))
    drive(processor, checkpointer, [records(1, 1)], lambda: next(stops, True))
    assert checkpointer.history == [] and handler.calls == 1


def test_records_older_than_the_max_age_go_to_the_dead_letter(tmp_path: Path) -> None:
    clock = FakeClock()
    handler = ScriptedHandler(poison={2})
    processor = function_processor(
        handler,
        clock=clock,
        policy=policy(max_record_age_seconds=60, base_backoff_millis=20_000, max_backoff_millis=20_000),
        dead_letter=LocalDeadLetter(tmp_path),
    )
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded) | set(dead_lettered(tmp_path)))
    drive(processor, checkpointer, [records(1, 3)])
    assert set(dead_lettered(tmp_path)) == {2}
    (document,) = LocalDeadLetter(tmp_path).read_all()
    assert 2 <= document["attempts"] <= 5  # dead-lettered once the record is a minute old


def test_a_failing_record_whose_creation_time_does_not_read_is_retried_and_dead_lettered(
    tmp_path: Path,
) -> None:
    """Its age is unknown: not too old, so its attempts decide (no error out of the policy)."""
    handler = ScriptedHandler(poison={2})
    processor = function_processor(
        handler,
        clock=FakeClock(),
        policy=policy(max_record_age_seconds=60, max_retry_attempts=2),
        dead_letter=LocalDeadLetter(tmp_path),
    )
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded) | set(dead_lettered(tmp_path)))
    bad: Any = "noon"
    drive(processor, checkpointer, [(*records(1, 1), *records(2, 2, created=bad), *records(3, 3))])
    assert set(dead_lettered(tmp_path)) == {2} and handler.succeeded == [1, 3]
    (document,) = LocalDeadLetter(tmp_path).read_all()
    assert document["attempts"] == 3


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=5),
    poison=st.sets(st.integers(min_value=1, max_value=60), max_size=4),
    every=st.integers(min_value=0, max_value=5),
    bisect=st.booleans(),
    max_records=st.integers(min_value=1, max_value=10),
)
def test_property_nothing_lost_nothing_ahead(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    poison: set[int],
    every: int,
    bisect: bool,
    max_records: int,
) -> None:
    directory = tmp_path_factory.mktemp("dead")
    handler = ScriptedHandler(every=every if every > 1 else 0, poison=poison)
    processor = function_processor(
        handler,
        clock=FakeClock(),
        policy=policy(max_retry_attempts=3, bisect_on_error=bisect),
        dead_letter=LocalDeadLetter(directory),
        batch_size=max_records,
    )
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded) | set(dead_lettered(directory)))
    batches, first = [], 1
    for size in sizes:
        batches.append(records(first, first + size - 1))
        first += size
    drive(processor, checkpointer, batches)
    everything = list(range(1, first))
    lost = set(dead_lettered(directory))
    # Bisecting isolates exactly the poison records; without it their batch-mates go with them.
    if bisect:
        assert lost == poison & set(everything)
    else:
        assert poison & set(everything) <= lost
    assert sorted(set(handler.succeeded) | lost) == everything
    survivors = list(handler.succeeded)
    assert sorted(set(survivors)) == [s for s in everything if s not in lost]
    # Successes arrive in order (a retry may repeat a suffix, never go back before it).
    firsts: dict[int, int] = {}
    for index, seq in enumerate(survivors):
        firsts.setdefault(seq, index)
    assert sorted(firsts, key=firsts.__getitem__) == sorted(firsts)
    if everything:
        assert checkpointer.last_checkpoint == str(everything[-1]).zfill(21)


def test_a_changelog_sink_frozen_mid_batch_does_not_land_after_its_lease_went(tmp_path: Path) -> None:
    """A worker frozen (SIGSTOP, a long pause) inside a slow batch wakes up fenced: the sink checks
    ``batch.lease_held()`` right before landing, lands nothing, and nothing is checkpointed."""
    clock = FakeClock()
    sink = ChangelogSink(ChangelogStore(str(tmp_path)), "orders")
    checkpointer = WatchingCheckpointer(set)

    def frozen_then_land(batch: Batch) -> None:
        clock.advance(20_000)  # the pause: meanwhile the worker fenced itself and the lease moved on
        checkpointer.lose_lease()
        sink(batch)

    processor = function_processor(frozen_then_land, clock=clock, policy=policy())
    held = lambda: checkpointer.lease_held  # noqa: E731
    drive(processor, checkpointer, [records(1, 5)], lambda: not held(), held)
    assert checkpointer.history == []
    assert list(tmp_path.rglob("*.jsonl.gz")) == []


def test_a_graceful_stop_mid_batch_still_lands_and_checkpoints_it(tmp_path: Path) -> None:
    """SIGTERM while a slow batch is in flight: should_stop turns true, the lease is still held,
    so the batch lands and is checkpointed (the next owner does not get it again)."""
    sink = ChangelogSink(ChangelogStore(str(tmp_path)), "orders")
    stopping = {"now": False}
    checkpointer = WatchingCheckpointer(lambda: set(range(1, 6)))

    def slow_then_land(batch: Batch) -> None:
        stopping["now"] = True  # the stop arrives while the batch is being handled
        sink(batch)

    processor = function_processor(slow_then_land, clock=FakeClock(), policy=policy())
    drive(processor, checkpointer, [records(1, 5)], lambda: stopping["now"])
    assert len(list(tmp_path.rglob("*.jsonl.gz"))) == 1
    assert checkpointer.history and int(checkpointer.history[-1]) == 5


def test_the_changelog_sink_lands_while_the_lease_is_held(tmp_path: Path) -> None:
    sink = ChangelogSink(ChangelogStore(str(tmp_path)), "orders")
    checkpointer = WatchingCheckpointer(lambda: set(range(1, 6)))
    processor = function_processor(sink, clock=FakeClock(), policy=policy())
    drive(processor, checkpointer, [records(1, 5)])
    assert len(list(tmp_path.rglob("*.jsonl.gz"))) == 1
    assert checkpointer.history and int(checkpointer.history[-1]) == 5

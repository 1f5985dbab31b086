"""Per-key parallelism (processing.parallelization_factor): lanes keep each key's order, finish every
record, and never let the checkpoint pass an unfinished record — under failures, stops and lease
losses, with the real function-form adapter and the failure policy."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.processing import (
    Batch,
    BatchResult,
    HandlerStoppedError,
    InitializationInput,
    LeaseLostError,
    LeaseLostInput,
    ProcessRecordsInput,
    ShutdownRequestedInput,
    function_processor,
)
from consumer.processing.dead_letter import FailedRecords
from consumer.processing.failure_policy import FailurePolicyRunner
from consumer.processing.lanes import LaneRunner, lane_of
from consumer.processing.retry import RetryPolicy
from consumer.records import ShardInfo, StreamRecord
from consumer.sinks.changelog import ChangelogSink, ChangelogStore
from ground.clock import FakeClock
from tests.unit.processing.helpers import SHARD, WatchingCheckpointer, record

INFO = ShardInfo(SHARD)


class MemoryDeadLetter:
    description = "memory"

    def __init__(self, log: list[tuple[str, int, str]], lock: threading.Lock) -> None:
        self._log = log
        self._lock = lock
        self.sent: set[int] = set()

    def send(self, failed: FailedRecords) -> None:
        with self._lock:
            for r in failed.records:
                self.sent.add(int(r.sequence_number))
                self._log.append(("dead", int(r.sequence_number), key_of(r)))


def key_of(r: StreamRecord) -> str:
    return str(r.keys["pk"])


class LaneHandler:
    """Applies records one by one (a side effect per record, logged), and fails on purpose:

    * a ``poison`` record raises every time (it ends in the dead letter);
    * a ``partial`` record is reported failed (BatchResult) the first time it is reached;
    * every ``every``-th call raises before applying anything.

    It also notices two batches holding the same key at once (a key split over lanes).
    """

    def __init__(self, *, poison: set[int], partial: set[int], every: int, stop_at: int | None) -> None:
        self.poison = poison
        self.partial = set(partial)
        self.every = every
        self.stop_at = stop_at
        self.lock = threading.Lock()
        self.log: list[tuple[str, int, str]] = []  # ("applied" | "dead", seq, key), in time order
        self.succeeded: set[int] = set()
        self.calls = 0
        self.in_flight: Counter[str] = Counter()
        self.overlaps: list[str] = []
        self.on_call: list[Any] = []

    def __call__(self, batch: Batch) -> BatchResult | None:
        keys = {key_of(r) for r in batch.records}
        with self.lock:
            self.calls += 1
            call = self.calls
            for key in keys:
                self.in_flight[key] += 1
                if self.in_flight[key] > 1:
                    self.overlaps.append(key)
            hooks = list(self.on_call)
        try:
            for hook in hooks:
                hook(call)
            time.sleep(0.0002)  # lets the lanes interleave; nothing is asserted about time
            if self.every and call % self.every == 0:
                raise RuntimeError(f"call {call} fails")
            for r in batch.records:
                seq = int(r.sequence_number)
                if seq in self.poison:
                    raise ValueError(f"poison {seq}")
                with self.lock:
                    if seq in self.partial:
                        self.partial.discard(seq)
                        return BatchResult.failed(r, error="partial")
                    self.log.append(("applied", seq, key_of(r)))
                    self.succeeded.add(seq)
            return None
        finally:
            with self.lock:
                for key in keys:
                    self.in_flight[key] -= 1


def first_applied_order_holds(log: list[tuple[str, int, str]], stream: list[StreamRecord]) -> list[str]:
    """Per key: a record is applied only after every earlier record of its key was applied or
    dead-lettered (a replay may repeat records, never overtake one)."""
    earlier: dict[str, list[int]] = defaultdict(list)
    for r in stream:
        earlier[key_of(r)].append(int(r.sequence_number))
    seen: dict[str, set[int]] = defaultdict(set)
    problems = []
    for kind, seq, key in log:
        if kind == "applied":
            missing = [s for s in earlier[key] if s < seq and s not in seen[key]]
            if missing:
                problems.append(f"{key}: {seq} before {missing}")
        seen[key].add(seq)
    return problems


def held_by(checkpointer: WatchingCheckpointer) -> Callable[[], bool]:
    return lambda: checkpointer.lease_held


def drive_ownerships(
    stream: list[StreamRecord],
    handler: LaneHandler,
    dead: MemoryDeadLetter,
    *,
    lanes: int,
    chunks: list[int],
    batch_size: int,
    stops: list[tuple[int, bool]],
) -> str:
    """Deliver ``stream`` as the lifecycle would, ownership after ownership: each starts at the last
    checkpoint; a stop (graceful, or the lease lost) ends one. Returns the final checkpoint."""
    last = "TRIM_HORIZON"
    for ownership in range(len(stops) + 2):
        remaining = [r for r in stream if not last.isdigit() or int(r.sequence_number) > int(last)]
        if not remaining:
            return last
        stop_at, lose = stops[ownership] if ownership < len(stops) else (0, False)
        checkpointer = WatchingCheckpointer(lambda: handler.succeeded | dead.sent)
        checkpointer.last_checkpoint = last
        stopping = threading.Event()

        def maybe_stop(
            call: int,
            stop_at: int = stop_at,
            lose: bool = lose,
            checkpointer: WatchingCheckpointer = checkpointer,
            stopping: threading.Event = stopping,
        ) -> None:
            if stop_at and call >= stop_at:
                if lose:
                    checkpointer.lose_lease()
                stopping.set()

        handler.on_call = [maybe_stop]
        processor = function_processor(
            handler,
            clock=FakeClock(),
            policy=RetryPolicy(
                max_retry_attempts=2, base_backoff_millis=5, max_backoff_millis=20, rng=random.Random(1)
            ),
            dead_letter=dead,
            batch_size=batch_size,
            parallelization_factor=lanes,
        )
        processor.initialize(InitializationInput(INFO, last))
        position, size_index = 0, 0
        lost = False
        while position < len(remaining) and not stopping.is_set():
            size = chunks[size_index % len(chunks)]
            size_index += 1
            chunk = tuple(remaining[position : position + size])
            position += size
            checkpointer.deliver(chunk)
            try:
                processor.process_records(
                    ProcessRecordsInput(chunk, checkpointer, 0, INFO, stopping.is_set, held_by(checkpointer))
                )
            except LeaseLostError:
                lost = True
                break
        if lost or not checkpointer.lease_held:
            processor.lease_lost(LeaseLostInput(INFO))
        else:
            processor.shutdown_requested(ShutdownRequestedInput(INFO, checkpointer, stopping.is_set))
        last = checkpointer.last_checkpoint
    raise AssertionError(f"not finished after {len(stops) + 2} ownerships (checkpoint {last})")


@settings(max_examples=120, deadline=None)
@given(
    keys=st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=60),
    lanes=st.integers(min_value=2, max_value=10),
    chunks=st.lists(st.integers(min_value=1, max_value=25), min_size=1, max_size=4),
    batch_size=st.integers(min_value=1, max_value=12),
    poison=st.sets(st.integers(min_value=1, max_value=60), max_size=3),
    partial=st.sets(st.integers(min_value=1, max_value=60), max_size=4),
    every=st.sampled_from([0, 0, 4, 7]),
    stops=st.lists(st.tuples(st.integers(min_value=1, max_value=30), st.booleans()), max_size=3),
)
def test_property_lanes_keep_key_order_finish_everything_and_never_checkpoint_ahead(
    keys: list[int],
    lanes: int,
    chunks: list[int],
    batch_size: int,
    poison: set[int],
    partial: set[int],
    every: int,
    stops: list[tuple[int, bool]],
) -> None:
    stream = [record(seq, key=f"k{key}") for seq, key in enumerate(keys, start=1)]
    handler = LaneHandler(poison=poison, partial=partial, every=every, stop_at=None)
    dead = MemoryDeadLetter(handler.log, handler.lock)
    final = drive_ownerships(
        stream, handler, dead, lanes=lanes, chunks=chunks, batch_size=batch_size, stops=stops
    )
    everything = {int(r.sequence_number) for r in stream}
    assert final == stream[-1].sequence_number
    assert handler.succeeded | dead.sent == everything  # every record processed or dead-lettered
    assert poison & everything <= dead.sent  # poison never "succeeds"
    assert not handler.overlaps, f"a key was in two lanes at once: {handler.overlaps[:5]}"
    assert first_applied_order_holds(handler.log, stream) == []
    # (The checkpointer fails the run the moment a checkpoint passes an unfinished record.)


def test_the_order_check_notices_a_key_handled_out_of_order() -> None:
    stream = [record(1, key="a"), record(2, key="a")]
    assert first_applied_order_holds([("applied", 2, "a"), ("applied", 1, "a")], stream) == [
        "a: 2 before [1]"
    ]


def test_a_key_always_hashes_to_the_same_lane_and_keys_spread() -> None:
    lanes = {lane_of(record(seq, key=f"item-{seq % 50}"), 10) for seq in range(1, 200)}
    assert lanes == set(range(10))
    assert {lane_of(record(s, key="same"), 10) for s in range(1, 30)} == {lane_of(record(99, key="same"), 10)}


def test_factor_one_is_the_serial_path_and_factor_ten_runs_ten_lanes_at_once() -> None:
    serial = function_processor(lambda batch: None)
    assert isinstance(serial._runner, FailurePolicyRunner)  # no pool, no thread hop
    # Ten keys in ten lanes meet at a barrier: it only opens if the ten batches are in flight together.
    stream = []
    for seq in range(1, 400):
        r = record(seq, key=f"item-{seq}")
        if lane_of(r, 10) not in {lane_of(x, 10) for x in stream}:
            stream.append(r)
        if len(stream) == 10:
            break
    barrier = threading.Barrier(10, timeout=30)
    threads: set[str] = set()

    def meet(batch: Batch) -> None:
        threads.add(threading.current_thread().name)
        barrier.wait()

    processor = function_processor(meet, parallelization_factor=10)
    assert isinstance(processor._runner, LaneRunner)
    checkpointer = WatchingCheckpointer(lambda: {int(r.sequence_number) for r in stream})
    checkpointer.deliver(tuple(stream))
    processor.process_records(ProcessRecordsInput(tuple(stream), checkpointer, 0, INFO))
    assert len(threads) == 10 and threading.current_thread().name not in threads
    assert checkpointer.last_checkpoint == stream[-1].sequence_number
    processor.shutdown_requested(ShutdownRequestedInput(INFO, checkpointer))


@pytest.mark.parametrize("created", [1_700_000_000.0, "noon"])
def test_a_stuck_lane_holds_the_checkpoint_while_the_others_go_on(created: Any) -> None:
    """Key "slow" fails until the worker stops; the other lanes finish; the checkpoint stays just
    before the slow record (what follows it is delivered again to the next owner). A creation time
    that does not read (``noon``) costs the lag metric, never the flush."""
    stream = [
        record(seq, key="slow", created=created) if seq == 4 else record(seq, key=f"k{seq}")
        for seq in range(1, 13)
    ]
    # Only the slow key's lane waits (records of other keys that hash to it queue behind record 4).
    slow_lane = lane_of(stream[3], 4)
    blocked = {int(r.sequence_number) for r in stream[3:] if lane_of(r, 4) == slow_lane}
    done: set[int] = set()
    stop = threading.Event()

    lock = threading.Lock()

    def handle(batch: Batch) -> None:
        with lock:
            if any(key_of(r) == "slow" for r in batch.records):
                if done == set(range(1, 13)) - blocked:
                    stop.set()  # everything else is through: the worker is asked to stop
                raise RuntimeError("downstream unavailable")
            done.update(int(r.sequence_number) for r in batch.records)

    checkpointer = WatchingCheckpointer(lambda: set(done))
    processor = function_processor(
        handle,
        clock=FakeClock(),
        policy=RetryPolicy(base_backoff_millis=5, max_backoff_millis=10, rng=random.Random(2)),
        parallelization_factor=4,
    )
    checkpointer.deliver(tuple(stream))
    processor.process_records(ProcessRecordsInput(tuple(stream), checkpointer, 0, INFO, stop.is_set))
    assert checkpointer.last_checkpoint == stream[2].sequence_number  # just before record 4
    assert done == set(range(1, 13)) - blocked and len(blocked) < 9


def test_a_lane_that_loses_the_lease_stops_the_others_and_nothing_more_is_checkpointed() -> None:
    stream = [record(seq, key=f"k{seq % 6}") for seq in range(1, 31)]
    done: set[int] = set()
    checkpointer = WatchingCheckpointer(lambda: set(done))

    def handle(batch: Batch) -> None:
        if 9 in {int(r.sequence_number) for r in batch.records}:
            checkpointer.lose_lease()
        done.update(int(r.sequence_number) for r in batch.records)

    processor = function_processor(handle, clock=FakeClock(), batch_size=2, parallelization_factor=6)
    checkpointer.deliver(tuple(stream))
    with pytest.raises(LeaseLostError):
        processor.process_records(ProcessRecordsInput(tuple(stream), checkpointer, 0, INFO))
    history = list(checkpointer.history)
    processor.lease_lost(LeaseLostInput(INFO))
    assert checkpointer.history == history
    assert all(int(h) < 30 for h in history)


def test_the_changelog_sink_in_lanes_lands_every_change_once_across_a_crash(tmp_path: Path) -> None:
    """Lane objects go to per-lane folders; a new owner after a lane stopped mid-way skips what each
    lane landed (the redelivery rule per lane) and writes the rest: every change exactly once."""
    stream = [record(seq, key=f"item-{seq % 8}") for seq in range(1, 41)]
    stuck_lane = lane_of(stream[4], 4)

    landed_first: set[int] = set()

    def first_owner(batch: Batch) -> BatchResult | None:
        if batch.lane == stuck_lane:
            raise HandlerStoppedError("frozen before landing")
        result = sink_one(batch)
        landed_first.update(int(r.sequence_number) for r in batch.records)
        return result

    sink_one = ChangelogSink(ChangelogStore(str(tmp_path)), "orders")
    sink_one.shard_started(INFO, "TRIM_HORIZON")
    checkpointer = WatchingCheckpointer(lambda: set(landed_first))  # never past record 5
    first = function_processor(first_owner, clock=FakeClock(), batch_size=3, parallelization_factor=4)
    checkpointer.deliver(tuple(stream))
    first.process_records(ProcessRecordsInput(tuple(stream), checkpointer, 0, INFO))
    assert checkpointer.last_checkpoint in ("TRIM_HORIZON", *(r.sequence_number for r in stream[:4]))
    resume = checkpointer.last_checkpoint

    sink_two = ChangelogSink(ChangelogStore(str(tmp_path)), "orders")
    second = function_processor(sink_two, clock=FakeClock(), batch_size=5, parallelization_factor=4)
    second.initialize(InitializationInput(INFO, resume))
    again = tuple(r for r in stream if not resume.isdigit() or int(r.sequence_number) > int(resume))
    checkpointer_two = WatchingCheckpointer(lambda: {int(r.sequence_number) for r in stream})
    checkpointer_two.last_checkpoint = resume
    checkpointer_two.deliver(again)
    second.process_records(ProcessRecordsInput(again, checkpointer_two, 0, INFO))
    assert checkpointer_two.last_checkpoint == stream[-1].sequence_number
    lanes = [f"{SHARD}~lane{lane:02d}of04" for lane in range(4)]
    assert all(sink_two.remembered(prefix) is not None for prefix in lanes)
    second.shutdown_requested(ShutdownRequestedInput(INFO, checkpointer_two))
    assert all(sink_two.remembered(prefix) is None for prefix in lanes)  # dropped with the ownership

    import gzip
    import json

    landed = Counter[int]()
    for path in tmp_path.rglob("*.jsonl.gz"):
        assert "~lane" in path.parent.name and path.parent.name.startswith(SHARD)
        with gzip.open(path, "rt") as handle:
            for line in handle:
                landed[int(json.loads(line)["sequenceNumber"])] += 1
    assert landed == Counter(range(1, 41))

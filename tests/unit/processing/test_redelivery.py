"""The one redelivery rule (consumer/processing/redelivery.py) and where it is applied: the shard
consumer (inside one process) and the changelog sink (across workers, against its destination).

Memory is measured as what the sink keeps per shard (ranges) and time as the range comparisons the
rule makes: deterministic work counts, never wall-clock times.
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.lifecycle.states import ShutdownReason
from consumer.processing import (
    Batch,
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
    function_processor,
)
from consumer.processing.function_processor import FunctionProcessor
from consumer.processing.redelivery import NOTHING_DONE, DoneSequences, floor_of
from consumer.records import ShardInfo, StreamRecord
from consumer.sinks.changelog import ChangelogSink, object_name
from ground.clock import FakeClock
from ground.positions import SUB_SEQUENCE_SPAN
from ground.settings import WorkerSettings
from tests.unit.lifecycle.fakes import record as shard_record
from tests.unit.lifecycle.test_shard_consumer import Rig
from tests.unit.processing.helpers import SHARD, WatchingCheckpointer, record

INFO = ShardInfo(SHARD)
STEP = 10  # sequence numbers of a real shard are increasing, not consecutive


def span(first: int, last: int) -> tuple[StreamRecord, ...]:
    """Records ``first``, ``first + STEP``, ... up to ``last``."""
    return tuple(record(s) for s in range(first, last + 1, STEP))


def numbers(records: tuple[StreamRecord, ...]) -> list[int]:
    return [int(r.sequence_number) for r in records]


class MemoryDestination:
    """A change-log destination in memory: object name -> the sequence numbers it holds."""

    destination = "memory://changes"

    def __init__(self) -> None:
        self.objects: dict[str, list[int]] = {}
        self.listings = 0

    def put(self, name: str, payload: bytes) -> None:
        import gzip

        import orjson

        lines = gzip.decompress(payload).splitlines()
        self.objects[name] = [int(orjson.loads(line)["sequenceNumber"]) for line in lines]

    def landed_ranges(self, shard_id: str) -> list[tuple[int, int]]:
        self.listings += 1
        found = []
        for name in self.objects:
            shard, _, rest = name.partition("/")
            if shard == shard_id:
                first, _, last = rest.split(".")[0].partition("-")
                found.append((int(first), int(last)))
        return found

    def landed(self) -> Counter[int]:
        """How many times each sequence number was landed (the contract: at most once)."""
        return Counter(n for held in self.objects.values() for n in held)


def sink_on(destination: MemoryDestination) -> ChangelogSink:
    return ChangelogSink(destination, "orders", now=lambda: 1.0)


# ------------------------------------------------------------------------------- the rule itself


def at(number: int) -> int:
    """Sequence number ``number`` as the rule compares it (ground.positions.ordinal)."""
    return number * SUB_SEQUENCE_SPAN


def test_a_floor_and_ranges_decide_what_is_handed_on_in_runs() -> None:
    done = DoneSequences(floor_of("30"), [(at(60), at(70)), (at(100), at(100)), (at(10), at(20))])
    # at or below the floor: gone
    assert done.floor == at(30) and done.ranges == ((at(60), at(70)), (at(100), at(100)))
    fresh = done.fresh(span(10, 120))
    assert [numbers(run) for run in fresh.runs] == [[40, 50], [80, 90], [110, 120]]
    assert fresh.skipped == 3 + 2 + 1
    assert floor_of("TRIM_HORIZON") == floor_of("LATEST") == NOTHING_DONE


def test_a_batch_after_everything_done_is_handed_on_whole_without_a_comparison() -> None:
    done = DoneSequences(floor_of("30"))
    batch = span(40, 90)
    fresh = done.fresh(batch)
    assert fresh.records is batch and fresh.skipped == 0 and done.comparisons == 0
    done.add(at(60), at(70))  # a range: the batch is walked again
    assert numbers(done.fresh(batch).records) == [40, 50, 80, 90] and done.comparisons > 0


def test_ranges_merge_and_collapse_into_the_floor() -> None:
    done = DoneSequences(5)
    done.add(20, 30)
    done.add(31, 40)  # touching: one range
    done.add(60, 70)
    done.add(35, 65)  # bridges both
    assert done.ranges == ((20, 70),)
    done.add(6, 10)  # reaches the floor: becomes the floor
    assert done.floor == 10 and done.size == 1
    done.advance(19)  # the floor reaches the range: absorbs it
    assert done.floor == 70 and done.size == 0
    done.add(1, 50)  # below the floor: nothing to remember
    assert done.floor == 70 and done.size == 0


@settings(max_examples=200, deadline=None)
@given(
    floor=st.integers(min_value=-1, max_value=40),
    first=st.integers(min_value=0, max_value=130),
    operations=st.lists(
        st.tuples(
            st.booleans(), st.integers(min_value=0, max_value=120), st.integers(min_value=0, max_value=15)
        ),
        max_size=25,
    ),
)
def test_property_the_rule_matches_a_plain_set(
    floor: int, first: int, operations: list[tuple[bool, int, int]]
) -> None:
    """Whatever the order of adds and floor moves, the compact form covers exactly the plain set;
    a batch starting anywhere (above the floor with no ranges: handed on whole) is cut the same."""
    done = DoneSequences(at(floor) if floor >= 0 else floor)
    model = set(range(0, floor + 1))
    for is_add, start, length in operations:
        if is_add:
            done.add(at(start), at(start + length))
            model |= set(range(start, start + length + 1))
        else:
            done.advance(at(start))
            model |= set(range(0, start + 1))
    assert [n for n in range(0, 140) if done.covers(at(n))] == sorted(n for n in model if n < 140)
    fresh = done.fresh(tuple(record(n) for n in range(0, 140)))
    assert numbers(fresh.records) == [n for n in range(0, 140) if n not in model]
    later = done.fresh(tuple(record(n) for n in range(first, 140)))
    assert numbers(later.records) == [n for n in range(first, 140) if n not in model]
    assert later.skipped == sum(1 for n in range(first, 140) if n in model)
    firsts, lasts = [r[0] for r in done.ranges], [r[1] for r in done.ranges]
    assert all(done.floor + 1 < f for f in firsts)  # nothing kept that the floor could hold
    assert all(lasts[i] + 1 < firsts[i + 1] for i in range(len(firsts) - 1))  # disjoint, not touching


# ------------------------------------------------------------- the changelog sink over a shard's life


def test_the_sink_keeps_flat_memory_and_work_per_batch_over_20_000_batches() -> None:
    """A busy shard's ~4-hour life: an earlier owner landed 40 objects past the checkpoint this
    worker starts from, then 20 000 batches land, every 50th delivered twice (a retry inside the
    process). What the sink keeps for the shard and the comparisons per batch must not grow with the
    number of batches landed (the old sink kept and scanned one range per batch, forever)."""
    destination = MemoryDestination()
    earlier = sink_on(destination)
    earlier.shard_started(INFO, "TRIM_HORIZON")
    for batch in range(1, 81):  # the earlier owner's checkpoint reached batch 40 only
        earlier(_batch(batch))
    destination.listings = 0
    sink = sink_on(destination)
    sink.shard_started(INFO, _last(40))
    kept: list[int] = []
    work: list[int] = []
    for batch in range(41, 20_041):
        for _ in range(2 if batch % 50 == 0 else 1):
            state = sink.remembered(SHARD)
            before = state.comparisons if state is not None else 0
            sink(_batch(batch))
            state = sink.remembered(SHARD)
            assert state is not None
            kept.append(state.size)
            work.append(state.comparisons - before)
    assert destination.listings == 1  # looked at the destination once for this ownership
    assert max(kept) <= 40 and kept[-1] == 0  # the earlier owner's ranges, absorbed as passed
    assert max(kept[100:]) == 0
    assert max(work[100:]) <= RECORDS_PER_BATCH + 1  # per batch: its records, not the history
    assert max(work[-1_000:]) <= max(work[100:1_100])
    counts = destination.landed()
    assert set(counts.values()) == {1} and len(counts) == 20_040 * RECORDS_PER_BATCH


RECORDS_PER_BATCH = 3


def _first(batch: int) -> int:
    return batch * 1_000


def _last(batch: int) -> str:
    return str(_first(batch) + (RECORDS_PER_BATCH - 1) * STEP)


def _batch(batch: int) -> Batch:
    return Batch(INFO, span(_first(batch), int(_last(batch))))


# --------------------------------------------------------------- across workers: look at each start


def test_a_shard_that_comes_back_after_another_worker_landed_more_is_looked_at_again() -> None:
    """The stale-cache case. Worker A lands 100..200 and checkpoints 140; B takes the shard from
    140, lands the rest up to 300 and dies before its checkpoint; A takes it back from 140. A's sink
    (the same instance, as the old shared sink was) must look at the destination again: what it knew
    from its first ownership does not show B's objects."""
    destination = MemoryDestination()
    a, b = sink_on(destination), sink_on(destination)
    a.shard_started(INFO, "TRIM_HORIZON")
    a(Batch(INFO, span(100, 200)))
    b.shard_started(INFO, "140")
    b(Batch(INFO, span(150, 300)))  # 150..200 already landed by A: B lands 210..300
    a.shard_started(INFO, "140")  # the shard comes back to A
    a(Batch(INFO, span(150, 350)))
    assert destination.landed() == Counter(range(100, 351, STEP))
    assert destination.listings == 3  # A twice (each start), B once


def test_a_lease_lost_then_retaken_forgets_and_looks_again() -> None:
    """Through the function form: lease_lost drops the sink's memory of the shard; the take-back
    (initialize) looks at the destination again and lands only what nobody landed."""
    destination = MemoryDestination()
    sink = sink_on(destination)
    mine = function_processor(sink, clock=FakeClock())
    checkpointer = WatchingCheckpointer(lambda: set(destination.landed()))
    _run(mine, checkpointer, "TRIM_HORIZON", span(100, 150))
    assert sink.remembered(SHARD) is not None
    mine.lease_lost(LeaseLostInput(INFO))
    assert sink.remembered(SHARD) is None
    other = sink_on(destination)  # another worker from checkpoint 150: lands 160..250, no checkpoint
    other.shard_started(INFO, "150")
    other(Batch(INFO, span(160, 250)))
    retaken = function_processor(sink, clock=FakeClock())
    _run(retaken, WatchingCheckpointer(lambda: set(destination.landed())), "150", span(160, 300))
    assert destination.landed() == Counter(range(100, 301, STEP))


@pytest.mark.parametrize("how", ["lease_lost", "shard_ended", "shutdown_requested"])
def test_the_sink_forgets_the_shard_when_the_ownership_ends(how: str) -> None:
    destination = MemoryDestination()
    sink = sink_on(destination)
    processor = function_processor(sink, clock=FakeClock())
    checkpointer = WatchingCheckpointer(lambda: set(destination.landed()))
    _run(processor, checkpointer, "TRIM_HORIZON", span(100, 150))
    assert sink.remembered(SHARD) is not None
    if how == "lease_lost":
        processor.lease_lost(LeaseLostInput(INFO))
    elif how == "shard_ended":
        checkpointer.at_shard_end = True
        processor.shard_ended(ShardEndedInput(INFO, checkpointer))
        assert checkpointer.last_checkpoint == "SHARD_END"
    else:
        processor.shutdown_requested(ShutdownRequestedInput(INFO, checkpointer))
    assert sink.remembered(SHARD) is None


def _run(
    processor: FunctionProcessor,
    checkpointer: WatchingCheckpointer,
    start: str,
    records: tuple[StreamRecord, ...],
) -> None:
    processor.initialize(InitializationInput(INFO, start))
    if start.isdigit():
        checkpointer.last_checkpoint = start.zfill(21)
    if records:
        checkpointer.deliver(records)
        processor.process_records(ProcessRecordsInput(records, checkpointer, 0, INFO))


# -------------------------------------------------------------- the shard consumer applies the rule


class HalfThenFail:
    """A class-form processor that checkpoints half of its first batch and then
    raises: the redelivery must start after that checkpoint."""

    def __init__(self) -> None:
        self.deliveries: list[list[int]] = []

    def initialize(self, initialization: InitializationInput) -> None:
        pass

    def process_records(self, process: ProcessRecordsInput) -> None:
        records = process.records
        self.deliveries.append(numbers(records))
        if len(self.deliveries) == 1:
            process.checkpointer.checkpoint(records[len(records) // 2 - 1].sequence_number)
            raise RuntimeError("failed half-way")
        if records:
            process.checkpointer.checkpoint()

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        shard_ended.checkpointer.checkpoint()

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        pass

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        pass


def test_the_shard_consumer_delivers_a_failed_batch_again_from_just_after_its_checkpoint() -> None:
    rig = Rig(WorkerSettings(max_records=10, idle_time_between_reads_millis=200))
    rig.stream.add("s1", 100, 10)  # 100, 110, ..., 190; closed
    rig.lease("s1")
    processor = HalfThenFail()
    consumer = rig.consumer("s1", processor)
    rig.drive(consumer)
    assert processor.deliveries[:2] == [list(range(100, 200, 10)), list(range(150, 200, 10))]
    assert consumer.life.reason is ShutdownReason.SHARD_END


def test_through_the_whole_path_each_change_lands_once_and_the_shard_is_forgotten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real shard consumer, the function form and the changelog sink: an earlier owner landed
    records past the checkpoint (its checkpoint never landed), and a checkpoint of this worker fails
    once (the batch is delivered again inside the process). Every change lands once; the redelivery
    across workers is logged for the demo's verdict; the sink forgets the shard when the lease goes."""
    rig = Rig(WorkerSettings(max_records=5, idle_time_between_reads_millis=200))
    rig.stream.add("s1", 100, 30, closed=False)  # 100, 110, ..., 390
    rig.lease("s1")
    destination = MemoryDestination()
    earlier = sink_on(destination)
    earlier(_batch_on("s1", range(100, 200, 10)))  # landed 100..190, checkpointed nothing
    sink = sink_on(destination)
    processor = function_processor(sink, clock=rig.clock)
    failing = FailOnceLeases(rig.coordinator, at_call=3)
    consumer = rig.consumer("s1", processor, leases=failing)
    with caplog.at_level(logging.INFO, logger="consumer.sinks"):
        for _ in range(40):
            rig.step(consumer)
    assert destination.landed() == Counter(range(100, 400, 10))
    assert failing.failed  # the in-process redelivery happened
    messages = [r.getMessage() for r in caplog.records]
    assert any("record(s) of shard s1 already landed by an earlier delivery" in m for m in messages)
    assert sink.remembered("s1") is not None
    consumer.lease_lost()
    rig.drive(consumer)
    assert consumer.life.reason is ShutdownReason.LEASE_LOST
    assert sink.remembered("s1") is None


def _batch_on(shard: str, sequence: range) -> Batch:
    return Batch(ShardInfo(shard), tuple(shard_record(shard, n) for n in sequence))


class FailOnceLeases:
    """The lease port with the ``at_call``-th checkpoint failing with an unexpected error."""

    def __init__(self, inner: object, at_call: int) -> None:
        self._inner = inner
        self._at = at_call
        self._calls = 0
        self.failed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def checkpoint(self, shard_id: str, position: str, counter: int | None = None) -> None:
        self._calls += 1
        if self._calls == self._at:
            self.failed = True
            raise RuntimeError("the checkpoint write failed in an unexpected way")
        self._inner.checkpoint(shard_id, position, counter)  # type: ignore[attr-defined]


def test_object_names_parse_back_in_the_memory_destination() -> None:
    destination = MemoryDestination()
    destination.objects[object_name(SHARD, "5", "25")] = [5, 15, 25]
    assert destination.landed_ranges(SHARD) == [(5, 25)]

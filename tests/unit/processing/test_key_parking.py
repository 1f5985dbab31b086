"""``processing.on_failure: park_key``: a failing record parks its key, the shard's other keys go on.

Driven through the real function form (buffer, flushes, shard end) with the in-memory checkpointer,
a fake clock and handlers that apply records one at a time. What must hold, whatever fails: every
record ends handled or dead-lettered; each key's records are done in sequence order; the checkpoint
never passes a record not done; a record already handled is not handed to the handler again, but
for the parked key's own later records (once); a key's retries and dead letters are the serial
policy's.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.processing import (
    InitializationInput,
    LeaseLostInput,
    ProcessingConfigError,
    ProcessRecordsInput,
    ShardEndedInput,
    function_processor,
)
from consumer.processing.function_processor import FunctionProcessor
from consumer.processing.lambda_event import LambdaContext
from consumer.processing.lambda_form import Invoker, LambdaBatchHandler, LambdaEnvironment, LambdaFunction
from consumer.processing.lanes import _Flush
from consumer.processing.retry import RetryPolicy
from consumer.records import ShardInfo, StreamRecord
from ground.clock import FakeClock
from ground.settings import Settings
from tests.unit.processing.helpers import SHARD, WatchingCheckpointer, record
from tests.unit.processing.key_handlers import DeadLetters, PerRecord, first_done_in_key_order

INFO = ShardInfo(SHARD)
ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-28T00:00:00.000"


def keyed(seq: int, item: int) -> StreamRecord:
    return record(seq, key=f"k{item}")


def processor_for(
    handler: Any, clock: FakeClock, dead: DeadLetters | None, **kwargs: Any
) -> FunctionProcessor:
    policy = RetryPolicy(
        max_retry_attempts=kwargs.pop("retries", 2),
        base_backoff_millis=100,
        max_backoff_millis=400,
        bisect_on_error=kwargs.pop("bisect", True),
        rng=random.Random(5),
    )
    processor = function_processor(
        handler,
        clock=clock,
        policy=policy,
        dead_letter=dead,
        on_failure=kwargs.pop("on_failure", "park_key"),
        **kwargs,
    )
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))
    return processor


def deliver(
    processor: FunctionProcessor, checkpointer: WatchingCheckpointer, batch: tuple[StreamRecord, ...]
) -> None:
    checkpointer.deliver(batch)
    processor.process_records(ProcessRecordsInput(batch, checkpointer, 0, INFO))


def test_a_poison_key_waits_while_every_other_key_of_the_shard_goes_on() -> None:
    clock = FakeClock()
    handler = PerRecord("raise", poison={3})
    dead = DeadLetters(handler.log, handler.lock)
    done = lambda: {s for _, s, _ in handler.log}  # noqa: E731
    checkpointer = WatchingCheckpointer(done)
    processor = processor_for(handler, clock, dead, retries=2)
    # Key k0 holds the poison record 3 and 6 after it; k1 and k2 change in between.
    first = (keyed(1, 1), keyed(2, 2), keyed(3, 0), keyed(4, 1), keyed(5, 2), keyed(6, 0), keyed(7, 1))
    deliver(processor, checkpointer, first)
    applied = [s for kind, s, _ in handler.log if kind == "applied"]
    assert applied == [1, 2, 4, 5, 7]  # every other key, in this very flush
    assert checkpointer.last_checkpoint == str(2).zfill(21)  # held just before the poison
    assert sorted(int(n) for n in checkpointer.finished_out_of_order) == [4, 5, 7]
    assert handler.given[6] == 1  # only in the first call: the poison key's later record waits
    # More records of the other keys flow while the poison key backs off.
    deliver(processor, checkpointer, (keyed(8, 2), keyed(9, 0)))
    assert [s for kind, s, _ in handler.log if kind == "applied"][-1] == 8
    assert 9 not in handler.given and checkpointer.last_checkpoint == str(2).zfill(21)
    for _ in range(6):  # empty calls on a quiet shard retry the key when its back-off is over
        clock.advance(500)
        deliver(processor, checkpointer, ())
    assert dead.sent == [3]  # two retries, then its dead letter
    assert [s for kind, s, _ in handler.log if kind == "applied"] == [1, 2, 4, 5, 7, 8, 6, 9]
    assert checkpointer.last_checkpoint == str(9).zfill(21) and processor.buffered == ()
    assert first_done_in_key_order(handler.log) == []
    # The batch and its halves down to itself (the first attempt), then two retries.
    assert handler.given[3] == 6


def test_a_partial_answer_parks_only_the_keys_it_names_and_gives_the_others_again_at_most_once() -> None:
    """The issue's Powertools case: 19 records, the 10th poison. Under park_key the poison alone is
    retried; the records before it are done, those after it come again once, at once (the answer
    could have stopped at the failure)."""
    clock = FakeClock()
    handler = PerRecord("named", poison={10})
    dead = DeadLetters(handler.log, handler.lock)
    checkpointer = WatchingCheckpointer(lambda: {s for _, s, _ in handler.log})
    processor = processor_for(handler, clock, dead, retries=1)
    deliver(processor, checkpointer, tuple(keyed(s, s) for s in range(1, 20)))
    for _ in range(4):
        clock.advance(500)
        deliver(processor, checkpointer, ())
    assert dead.sent == [10]
    assert {s: n for s, n in handler.given.items() if n > 1} == {10: 3, **{s: 2 for s in range(11, 20)}}
    assert handler.calls[1] == list(range(11, 20))  # in the same flush, not after the poison's retries
    assert checkpointer.last_checkpoint == str(19).zfill(21)


def test_under_block_a_record_reported_done_is_given_again_once_not_once_per_halving() -> None:
    """The same batch under the default policy: the checkpoint waits at the poison and the records
    after it come again after it (Lambda's rule), but once, not 19 -> 9 -> 4 -> 2 -> 1."""
    clock = FakeClock()
    handler = PerRecord("named", poison={10})
    dead = DeadLetters(handler.log, handler.lock)
    checkpointer = WatchingCheckpointer(lambda: {s for _, s, _ in handler.log})
    processor = processor_for(handler, clock, dead, retries=1, on_failure="block")
    deliver(processor, checkpointer, tuple(keyed(s, s) for s in range(1, 20)))
    assert dead.sent == [10]
    assert max(n for s, n in handler.given.items() if s != 10) == 2
    assert handler.calls[1] == [10]  # the named record alone first
    assert checkpointer.last_checkpoint == str(19).zfill(21)


def test_the_records_of_a_parked_key_after_the_failure_come_again_once_in_order() -> None:
    clock = FakeClock()
    handler = PerRecord("named", poison=set(), flaky={2: 2})
    checkpointer = WatchingCheckpointer(lambda: {s for _, s, _ in handler.log})
    processor = processor_for(handler, clock, None, retries=-1)
    batch = (keyed(1, 0), keyed(2, 0), keyed(3, 1), keyed(4, 0), keyed(5, 1))
    deliver(processor, checkpointer, batch)
    for _ in range(4):
        clock.advance(500)
        deliver(processor, checkpointer, ())
    # 4 (same key, after the failing 2) comes again once 2 succeeds; 3 and 5 (another key) come
    # again at once; 1 is done.
    assert handler.given == Counter({1: 1, 2: 3, 3: 2, 4: 2, 5: 2})
    assert handler.calls[:2] == [[1, 2, 3, 4, 5], [3, 5]]
    assert checkpointer.last_checkpoint == str(5).zfill(21)


def test_a_lambda_handler_answering_per_key_parks_only_its_failed_keys() -> None:
    calls: list[list[int]] = []

    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        records = event["Records"]
        calls.append([int(r["dynamodb"]["SequenceNumber"]) for r in records])
        failed = [r for r in records if r["dynamodb"]["Keys"]["pk"]["S"] == "k0"] if len(calls) == 1 else []
        return {"batchItemFailures": [{"itemIdentifier": r["dynamodb"]["SequenceNumber"]} for r in failed]}

    clock = FakeClock()
    invoker = Invoker(
        lambda_handler, LambdaFunction("orders"), LambdaEnvironment(lambda: ARN, "g", "s"), clock
    )
    processor = processor_for(LambdaBatchHandler(invoker), clock, None)
    checkpointer = WatchingCheckpointer(lambda: {s for call in calls[1:] for s in call} | {2, 4})
    deliver(processor, checkpointer, (keyed(1, 0), keyed(2, 1), keyed(3, 0), keyed(4, 2)))
    assert calls == [[1, 2, 3, 4], [2, 4], [1], [3]]  # k0's records alone, in order
    assert checkpointer.last_checkpoint == str(4).zfill(21)


def test_shard_end_waits_for_parked_keys_before_shard_end_is_checkpointed() -> None:
    clock = FakeClock()
    handler = PerRecord("raise", poison={2})
    dead = DeadLetters(handler.log, handler.lock)
    checkpointer = WatchingCheckpointer(lambda: {s for _, s, _ in handler.log})
    processor = processor_for(handler, clock, dead, retries=3)
    deliver(processor, checkpointer, (keyed(1, 0), keyed(2, 1), keyed(3, 1), keyed(4, 2)))
    assert processor.buffered  # the parked key's records are held
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(INFO, checkpointer))
    assert dead.sent == [2] and checkpointer.last_checkpoint == "SHARD_END"
    assert [s for kind, s, _ in handler.log if kind == "applied"] == [1, 4, 3]


def test_too_much_held_back_makes_the_shard_wait_for_its_parked_key() -> None:
    clock = FakeClock()
    handler = PerRecord("raise", poison=set(), flaky={1: 3})
    checkpointer = WatchingCheckpointer(lambda: {s for _, s, _ in handler.log})
    processor = processor_for(handler, clock, None, retries=-1, max_parked_records=4)
    start = clock.monotonic_millis()
    deliver(processor, checkpointer, (keyed(1, 0), keyed(2, 1), keyed(3, 2)))
    assert processor.buffered and clock.monotonic_millis() == start  # parked, the flush returned
    deliver(processor, checkpointer, (keyed(4, 3), keyed(5, 4)))  # 1 parked + 4 beyond it: the limit
    assert processor.buffered == () and clock.monotonic_millis() > start  # it slept on the back-off
    assert checkpointer.last_checkpoint == str(5).zfill(21)


def test_a_lost_lease_forgets_the_parked_keys() -> None:
    clock = FakeClock()
    handler = PerRecord("raise", poison={1})
    checkpointer = WatchingCheckpointer(lambda: {s for _, s, _ in handler.log})
    processor = processor_for(handler, clock, None, retries=-1)
    deliver(processor, checkpointer, (keyed(1, 0), keyed(2, 1)))
    processor.lease_lost(LeaseLostInput(INFO))
    handler.poison.clear()
    processor.initialize(InitializationInput(INFO, "TRIM_HORIZON"))  # the next owner, from the checkpoint
    deliver(processor, checkpointer, (keyed(1, 0), keyed(2, 1)))
    assert [s for kind, s, _ in handler.log if kind == "applied"] == [2, 1, 2]  # at least once across owners


def test_a_lane_that_finishes_records_beyond_a_parked_one_moves_the_shard_checkpoint() -> None:
    delivered = tuple(keyed(s, s) for s in range(1, 7))
    lanes = {0: (delivered[0], delivered[2], delivered[4]), 1: (delivered[1], delivered[3], delivered[5])}
    checkpoints: list[str] = []
    ahead: list[str] = []
    flush = _Flush(delivered, lanes, checkpoints.append, ahead.extend)
    flush.lane_finished(0, [delivered[2].sequence_number, delivered[4].sequence_number])  # 1 parked
    flush.lane_checkpoint(1, delivered[5].sequence_number)
    assert checkpoints == [] and flush.first_unfinished() is delivered[0]
    flush.lane_checkpoint(0, delivered[0].sequence_number)  # the parked record is done at last
    assert checkpoints == [delivered[5].sequence_number] and flush.first_unfinished() is None
    assert sorted(ahead) == sorted(r.sequence_number for r in delivered[1:])


def test_park_key_is_refused_where_it_cannot_hold() -> None:
    base: dict[str, Any] = {
        "application_name": "app",
        "table": {"name": "orders", "partition_key": {"name": "pk"}},
    }
    with pytest.raises(ValueError, match="park_key cannot be combined with tumbling_window_seconds"):
        Settings.model_validate(
            {**base, "processing": {"on_failure": "park_key", "tumbling_window_seconds": 5}}
        )
    from consumer.runtime.processors import build_processor_factory

    quiet = Settings.model_validate(
        {
            **base,
            "processing": {
                "on_failure": "park_key",
                "processor": "tests.unit.processing.user_processors:handle",
            },
        }
    )
    with pytest.raises(ProcessingConfigError, match="call_process_records_even_for_empty_record_list: true"):
        build_processor_factory(quiet)


# ------------------------------------------------------------------------------------ property


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    cuts=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    poison=st.sets(st.integers(1, 40), max_size=3),
    flaky=st.dictionaries(st.integers(1, 40), st.integers(1, 3), max_size=4),
    answer=st.sampled_from(["per_key", "raise"]),
    bisect=st.booleans(),
    lanes=st.sampled_from([1, 3]),
    batch_size=st.integers(1, 8),
    limit=st.sampled_from([3, 10_000]),
)
def test_property_per_key_order_nothing_lost_nothing_ahead_nothing_handled_more_than_again(
    keys: list[int],
    cuts: list[int],
    poison: set[int],
    flaky: dict[int, int],
    answer: str,
    bisect: bool,
    lanes: int,
    batch_size: int,
    limit: int,
) -> None:
    clock = FakeClock()
    handler = PerRecord(answer, poison={p for p in poison if p <= len(keys)}, flaky=flaky)
    dead = DeadLetters(handler.log, handler.lock)
    checkpointer = WatchingCheckpointer(lambda: {s for _, s, _ in handler.log})
    processor = processor_for(
        handler,
        clock,
        dead,
        retries=3,
        bisect=bisect,
        parallelization_factor=lanes,
        batch_size=batch_size,
        max_parked_records=limit,
    )
    everything = [keyed(seq, item) for seq, item in enumerate(keys, start=1)]
    position = 0
    for cut in cuts:
        deliver(processor, checkpointer, tuple(everything[position : position + cut]))
        position += cut
        clock.advance(150)
    deliver(processor, checkpointer, tuple(everything[position:]))
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(INFO, checkpointer))
    assert checkpointer.last_checkpoint == "SHARD_END"
    done = [s for _, s, _ in handler.log]
    assert sorted(set(done)) == list(range(1, len(keys) + 1))  # nothing lost
    assert first_done_in_key_order(handler.log) == []  # per-key order
    applied = Counter(s for kind, s, _ in handler.log if kind == "applied")
    # A handler that raises applies nothing of a failing call: each record is applied once. One that
    # answers applied the records after its first failure, which come again once.
    assert all(n <= (1 if answer == "raise" else 2) for n in applied.values())
    if bisect:
        assert set(dead.sent) == handler.poison  # exactly the poison records, each alone
    assert not set(dead.sent) & set(applied)

"""Batching across polls, filtering, shard end and lease loss of the function-form adapter."""

from __future__ import annotations

import pytest

from consumer.processing import (
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
    function_processor,
)
from consumer.processing.filters import RecordFilter
from consumer.processing.function_processor import FunctionProcessor
from consumer.processing.redelivery import DoneSequences, floor_of
from consumer.records import ShardInfo, StreamRecord
from ground.clock import FakeClock
from ground.settings import FilterSettings
from tests.unit.processing.helpers import SHARD, ScriptedHandler, WatchingCheckpointer, record, records

INFO = ShardInfo(SHARD)


def seq(n: int) -> str:
    return str(n).zfill(21)


def poll(
    processor: FunctionProcessor, checkpointer: WatchingCheckpointer, batch: tuple[StreamRecord, ...]
) -> None:
    checkpointer.deliver(batch)
    processor.process_records(ProcessRecordsInput(batch, checkpointer, 0, INFO))


def test_buffers_across_polls_until_the_window_passes_and_flushes_on_an_empty_call() -> None:
    clock = FakeClock()
    handler = ScriptedHandler()
    processor = function_processor(handler, clock=clock, batch_size=100, max_window_millis=1_000)
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded))
    poll(processor, checkpointer, records(1, 3))
    clock.advance(400)
    poll(processor, checkpointer, records(4, 5))
    assert handler.calls == 0 and checkpointer.history == []  # buffered, nothing checkpointed
    clock.advance(700)
    poll(processor, checkpointer, ())  # call_process_records_even_for_empty_record_list
    assert handler.succeeded == [1, 2, 3, 4, 5] and handler.calls == 1
    assert checkpointer.history == [seq(5)]


def test_flushes_at_the_record_limit() -> None:
    handler = ScriptedHandler()
    processor = function_processor(handler, clock=FakeClock(), batch_size=4, max_window_millis=60_000)
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded))
    poll(processor, checkpointer, records(1, 3))
    assert handler.calls == 0
    poll(processor, checkpointer, records(4, 9))
    assert handler.succeeded == list(range(1, 10))
    assert checkpointer.last_checkpoint == seq(9)


def test_filtered_records_are_not_processed_but_checkpointed_over() -> None:
    handler = ScriptedHandler()
    keep = RecordFilter.from_settings(
        FilterSettings(event_names=["INSERT"], new_image_equals={"colour": "red"})
    )
    processor = function_processor(handler, clock=FakeClock(), record_filter=keep)
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded) | {1, 3, 4, 5})
    red = {"colour": {"S": "red"}}
    batch = (
        record(1),
        record(2, image=red),
        record(3, event="REMOVE"),
        record(4, image={"colour": {"S": "blue"}}),
    )
    poll(processor, checkpointer, batch)
    assert handler.succeeded == [2]
    assert checkpointer.last_checkpoint == seq(4)
    poll(processor, checkpointer, (record(5),))  # only filtered records: still checkpointed
    assert checkpointer.last_checkpoint == seq(5) and handler.calls == 1


def test_key_filter_compares_numbers_as_numbers() -> None:
    keep = RecordFilter.from_settings(FilterSettings(key_equals={"pk": "item-3"}, new_image_equals={"n": 10}))
    assert keep.keeps(record(10, key="item-3"))
    assert not keep.keeps(record(11, key="item-3"))
    assert not keep.keeps(record(10, key="item-4"))


class FailingOnce(WatchingCheckpointer):
    """The first ``checkpoint`` calls raise the given errors (a throttle defers; anything else fails the
    call), then checkpoints are accepted."""

    def __init__(self, finished: object, errors: list[Exception]) -> None:
        super().__init__(finished)  # type: ignore[arg-type]
        self.errors = errors

    def checkpoint(self, sequence_number: str | None = None) -> None:
        if self.errors:
            raise self.errors.pop(0)
        super().checkpoint(sequence_number)


def redeliver(
    processor: FunctionProcessor, checkpointer: WatchingCheckpointer, batch: tuple[StreamRecord, ...]
) -> None:
    """What the shard consumer does after ``process_records`` raised: the same batch, cut at the
    checkpoint by the one redelivery rule."""
    done = DoneSequences(floor_of(checkpointer.last_checkpoint))
    processor.process_records(ProcessRecordsInput(done.fresh(batch).records, checkpointer, 0, INFO))


def test_a_call_that_raises_gives_its_records_back_so_a_redelivery_buffers_them_once() -> None:
    handler = ScriptedHandler()
    processor = function_processor(handler, clock=FakeClock(), batch_size=6, max_window_millis=60_000)
    checkpointer = FailingOnce(lambda: set(handler.succeeded), [RuntimeError("checkpoint bug")])
    poll(processor, checkpointer, records(1, 3))  # buffered: not due yet
    with pytest.raises(RuntimeError):
        poll(processor, checkpointer, records(4, 6))  # due: handled, but the checkpoint fails
    assert [int(r.sequence_number) for r in processor.buffered] == [1, 2, 3]  # 4..6 given back
    redeliver(processor, checkpointer, records(4, 6))
    assert handler.succeeded == [1, 2, 3, 4, 5, 6] * 2  # not finished the first time: once more
    assert checkpointer.history == [seq(6)] and processor.buffered == ()


def test_shard_end_flushes_then_checkpoints_shard_end() -> None:
    handler = ScriptedHandler()
    processor = function_processor(handler, clock=FakeClock(), batch_size=10, max_window_millis=10_000)
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded))
    poll(processor, checkpointer, records(1, 3))
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(INFO, checkpointer))
    assert handler.succeeded == [1, 2, 3]
    assert checkpointer.history == [seq(3), "SHARD_END"]


def test_shutdown_flushes_and_lease_loss_drops_the_buffer() -> None:
    handler = ScriptedHandler()
    processor = function_processor(handler, clock=FakeClock(), batch_size=10, max_window_millis=10_000)
    checkpointer = WatchingCheckpointer(lambda: set(handler.succeeded))
    poll(processor, checkpointer, records(1, 2))
    processor.shutdown_requested(ShutdownRequestedInput(INFO, checkpointer))
    assert checkpointer.last_checkpoint == seq(2)
    poll(processor, checkpointer, records(3, 4))
    processor.lease_lost(LeaseLostInput(INFO))
    assert processor.buffered == () and handler.succeeded == [1, 2]


class ThrottledOnce(WatchingCheckpointer):
    """The leases table refuses the first ``refusals`` checkpoints (throttled), then accepts."""

    def __init__(self, finished: object, refusals: int) -> None:
        super().__init__(finished)  # type: ignore[arg-type]
        self.refusals = refusals

    def checkpoint(self, sequence_number: str | None = None) -> None:
        if self.refusals:
            from consumer.leases.errors import LeaseStoreThrottledError

            self.refusals -= 1
            raise LeaseStoreThrottledError("ProvisionedThroughputExceededException")
        super().checkpoint(sequence_number)


def test_a_throttled_checkpoint_never_hands_processed_records_to_the_handler_again() -> None:
    handler = ScriptedHandler()
    processor = function_processor(handler, clock=FakeClock(), batch_size=3, max_window_millis=60_000)
    checkpointer = ThrottledOnce(lambda: set(handler.succeeded), refusals=1)
    poll(processor, checkpointer, records(1, 3))  # processed; its checkpoint is throttled
    assert handler.succeeded == [1, 2, 3] and checkpointer.history == [] and processor.buffered == ()
    poll(processor, checkpointer, records(4, 6))
    assert handler.succeeded == [1, 2, 3, 4, 5, 6] and checkpointer.history == [seq(6)]


def test_a_deferred_checkpoint_is_recorded_before_a_failed_call_is_delivered_again() -> None:
    """Records 1..3 are processed but their checkpoint is throttled; then the call fails. The
    redelivery starts after the recorded checkpoint, so the deferred one is written first: 1..3 never
    reach the handler twice."""
    from consumer.leases.errors import LeaseStoreThrottledError

    handler = ScriptedHandler()
    processor = function_processor(handler, clock=FakeClock(), batch_size=3)
    checkpointer = FailingOnce(
        lambda: set(handler.succeeded), [LeaseStoreThrottledError("slow down"), RuntimeError("bug")]
    )
    with pytest.raises(RuntimeError):
        poll(processor, checkpointer, records(1, 6))  # spans 1..3 (deferred) and 4..6 (fails)
    assert checkpointer.history == [seq(3)] and processor.buffered == ()
    redeliver(processor, checkpointer, records(1, 6))
    assert handler.succeeded == [1, 2, 3, 4, 5, 6, 4, 5, 6]
    assert checkpointer.history == [seq(3), seq(6)]


def test_a_deferred_checkpoint_is_written_before_the_lease_is_handed_on() -> None:
    handler = ScriptedHandler()
    processor = function_processor(handler, clock=FakeClock(), batch_size=3, max_window_millis=60_000)
    checkpointer = ThrottledOnce(lambda: set(handler.succeeded), refusals=1)
    poll(processor, checkpointer, records(1, 3))
    processor.shutdown_requested(ShutdownRequestedInput(INFO, checkpointer))
    assert checkpointer.history == [seq(3)] and handler.calls == 1

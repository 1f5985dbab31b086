"""The shard consumer's state machine fed events and asked for actions, with no stream, table,
processor or clock: each test is a sequence of outcomes in and the actions that must come out."""

from __future__ import annotations

import random

import pytest

from consumer.leases.errors import LeaseLostError, LeaseStoreThrottledError
from consumer.lifecycle.polling import QUICK_PARENT_POLLS
from consumer.lifecycle.shard_actions import (
    Action,
    CheckParents,
    Deliver,
    Done,
    EndShard,
    Failed,
    Fetch,
    Fetched,
    Finished,
    GetIterator,
    Initialize,
    IteratorAt,
    Moved,
    Outcome,
    ParentsChecked,
    ProtocolError,
    Redeliver,
    Release,
    Request,
    Retrying,
    ShardEndNotCheckpointed,
    ShardFinished,
    StopProcessor,
    TrimmedLoss,
    Wait,
)
from consumer.lifecycle.shard_machine import ShardMachine
from consumer.lifecycle.states import ShardState, ShutdownReason
from consumer.records import ShardInfo
from consumer.streams.errors import ExpiredIteratorError, TrimmedDataError
from ground.settings import WorkerSettings
from tests.unit.lifecycle.fakes import record

SETTINGS = WorkerSettings(idle_time_between_reads_millis=200, task_backoff_time_millis=100)
READ_LIMIT = 3  # records a Fetch asks for: a batch of 3 is full
NOW = 1_000


def machine(checkpoint: str = "TRIM_HORIZON", **settings: object) -> ShardMachine:
    return ShardMachine(
        ShardInfo("s1"), checkpoint, SETTINGS.model_copy(update=settings), READ_LIMIT, random.Random(7)
    )


def step(
    m: ShardMachine,
    outcomes: list[Outcome],
    *,
    lease_gone: bool = False,
    stop: bool = False,
    checkpoint: str | None = None,
    after: str | None = None,
    finished: tuple[str, ...] = (),
) -> list[Action]:
    """One step: observe (with ``checkpoint``), then act until the step yields, answering requests
    with ``outcomes`` in order (with ``after`` as the checkpoint the processor left); returns every
    action the machine produced."""
    observed = checkpoint if checkpoint is not None else m.checkpoint
    m.observe(lease_gone=lease_gone, stop=stop, checkpoint=observed)
    position = after if after is not None else observed
    produced: list[Action] = []
    while True:
        action = m.next_action(NOW)
        produced.append(action)
        if isinstance(action, Wait | Finished):
            assert not outcomes, f"outcomes left unanswered: {outcomes}"
            return produced
        if not isinstance(action, Request):
            continue  # a note
        m.answer(outcomes.pop(0), NOW, checkpoint=position, finished=finished)


def requests(actions: list[Action]) -> list[type]:
    return [type(a) for a in actions]


def started() -> ShardMachine:
    m = machine()
    step(m, [ParentsChecked(0)])
    step(m, [Done(), IteratorAt("it-0")])
    assert m.life.state is ShardState.PROCESSING
    return m


RECORDS = tuple(record("s1", n) for n in (10, 20, 30))


def test_a_shard_starts_parents_then_initialize_then_an_iterator_each_step_ending_in_a_wait() -> None:
    m = machine()
    first = step(m, [ParentsChecked(0)])
    assert first[0] == CheckParents(())
    assert first[1:] == [Moved(first[1].before, first[1].after, first[1].event), Wait(NOW)]  # type: ignore[union-attr]
    second = step(m, [Done(), IteratorAt("it-0")])
    assert requests(second) == [Initialize, GetIterator, Moved, Wait]
    assert second[1] == GetIterator("TRIM_HORIZON")


def test_a_lease_with_a_position_inside_its_shard_starts_without_reading_the_parents() -> None:
    # Somebody processed the shard, so its parents were finished: a moved lease goes straight to
    # initialize and an iterator after the checkpoint.
    m = ShardMachine(ShardInfo("s2", ("s1",)), "1000", SETTINGS, READ_LIMIT, random.Random(7))
    actions = step(m, [Done(), IteratorAt("it-0")])
    assert CheckParents not in requests(actions)
    assert requests(actions) == [Moved, Initialize, GetIterator, Moved, Wait]
    assert actions[2] == GetIterator("1000")
    assert m.life.state is ShardState.PROCESSING


def test_a_lease_at_a_sentinel_checks_its_parents_first() -> None:
    for sentinel in ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"):
        m = ShardMachine(ShardInfo("s2", ("s1",)), sentinel, SETTINGS, READ_LIMIT, random.Random(7))
        assert step(m, [ParentsChecked(1)])[0] == CheckParents(("s1",))


def test_pending_parents_are_checked_again_soon_at_first_then_after_the_poll_interval() -> None:
    """A child leased before its parent ended usually waits for a parent that is just finishing: it
    checks every half taking interval at first (it starts within one of the parent's end, issue 46),
    then every parent_shard_poll_interval_millis (a parent far behind costs few reads)."""
    m = machine()
    quick = min(SETTINGS.taker_interval_millis // 2, SETTINGS.parent_shard_poll_interval_millis)
    for _ in range(QUICK_PARENT_POLLS):
        assert step(m, [ParentsChecked(1)])[-1] == Wait(NOW + quick)
    assert step(m, [ParentsChecked(1)])[-1] == Wait(NOW + SETTINGS.parent_shard_poll_interval_millis)
    assert m.life.state is ShardState.WAITING_ON_PARENT_SHARDS


def test_a_fetch_delivers_in_the_same_step_and_waits_the_idle_time() -> None:
    m = started()
    actions = step(m, [Fetched(RECORDS[:2], 0, "it-1"), Done()])
    assert actions[0] == Fetch("it-0", 3)
    assert actions[1] == Deliver(RECORDS[:2], 0)
    assert actions[-1] == Wait(NOW + 200)


def test_a_batch_the_processor_fails_on_is_delivered_again_after_the_checkpoint_only() -> None:
    m = started()
    actions = step(m, [Fetched(RECORDS, 0, "it-1"), Failed(RuntimeError("boom"))], checkpoint="TRIM_HORIZON")
    redeliver = next(a for a in actions if isinstance(a, Redeliver))
    assert (redeliver.records, redeliver.attempt) == (3, 1)
    assert actions[-1] == Wait(NOW + redeliver.delay_millis)
    # The processor had checkpointed the first record before it raised: only the rest comes again.
    again = step(m, [Done()], checkpoint=RECORDS[0].sequence_number)
    assert again[0] == Deliver(RECORDS[1:], 0, attempt=1)


def test_records_finished_out_of_order_are_not_delivered_again() -> None:
    m = started()
    finished = (RECORDS[1].sequence_number,)
    step(m, [Fetched(RECORDS, 0, "it-1"), Failed(RuntimeError("lane 0 broke"))], finished=finished)
    assert step(m, [Done()])[0] == Deliver((RECORDS[0], RECORDS[2]), 0, attempt=1)


def test_a_fetch_answered_after_the_lease_was_lost_is_never_delivered() -> None:
    m = started()
    step(m, [Fetched(RECORDS, 0, "it-1"), Failed(LeaseLostError("checkpoint", "s1", None))])
    assert m.life.state is ShardState.SHUTTING_DOWN and m.life.reason is ShutdownReason.LEASE_LOST
    actions = step(m, [Done()], lease_gone=True)
    assert actions[0] == StopProcessor(ShutdownReason.LEASE_LOST, initialized=True)
    assert isinstance(actions[-1], Finished)
    assert not any(isinstance(a, Deliver) for a in actions)


def test_a_lease_lost_while_waiting_for_parents_tells_the_processor_nothing() -> None:
    m = machine()
    step(m, [ParentsChecked(1)])
    actions = step(m, [Done()], lease_gone=True)
    assert StopProcessor(ShutdownReason.LEASE_LOST, initialized=False) in actions


def test_an_expired_iterator_is_acquired_again_after_what_was_delivered() -> None:
    m = started()
    step(m, [Fetched(RECORDS, 0, "it-1"), Done()])
    assert step(m, [Failed(ExpiredIteratorError("expired"))])[-1] == Wait(NOW)
    actions = step(m, [IteratorAt("it-2"), Fetched((), 0, "it-3")])
    assert actions[0] == GetIterator(RECORDS[-1].sequence_number)


def test_trimmed_data_at_start_skips_to_the_oldest_record_when_told_and_says_so() -> None:
    m = machine(on_trimmed="skip_to_trim_horizon")
    step(m, [ParentsChecked(0)])
    actions = step(m, [Done(), Failed(TrimmedDataError("trimmed")), IteratorAt("it-0")])
    assert requests(actions) == [Initialize, GetIterator, TrimmedLoss, GetIterator, Moved, Wait]
    assert actions[3] == GetIterator("TRIM_HORIZON", after_trim=True)


def test_trimmed_data_without_skip_retries_with_back_off_and_stays_put() -> None:
    m = started()
    actions = step(m, [Failed(TrimmedDataError("trimmed"))])
    assert requests(actions) == [Fetch, TrimmedLoss, Retrying, Wait]
    assert isinstance(actions[-1], Wait) and actions[-1].until > NOW
    assert m.life.state is ShardState.PROCESSING


def test_shard_end_waits_for_the_processor_to_checkpoint_it_and_a_lost_lease_ends_the_wait() -> None:
    m = started()
    step(m, [Fetched(RECORDS, 0, None), Done()])
    assert m.life.state is ShardState.SHUTTING_DOWN and m.life.reason is ShutdownReason.SHARD_END
    refused = step(m, [Done()])  # shard_ended returned without checkpointing SHARD_END
    assert requests(refused)[:2] == [EndShard, ShardEndNotCheckpointed]
    actions = step(m, [Done()], lease_gone=True)  # still SHUTTING_DOWN, now for LEASE_LOST
    assert actions[0] == StopProcessor(ShutdownReason.LEASE_LOST, initialized=True)


def test_shard_end_checkpointed_tells_shard_sync_and_finishes() -> None:
    m = started()
    step(m, [Fetched(RECORDS, 0, None), Done()])
    actions = step(m, [Done(), Done()], after="SHARD_END")
    assert requests(actions) == [EndShard, ShardFinished, Moved, Finished]


def test_a_graceful_stop_tells_the_processor_then_releases_and_a_throttled_release_is_retried() -> None:
    m = started()
    actions = step(m, [Done(), Failed(LeaseStoreThrottledError("release: throttled"))], stop=True)
    assert requests(actions)[:3] == [Moved, StopProcessor, Release]
    assert isinstance(actions[-1], Wait) and actions[-1].until > NOW
    assert requests(step(m, [Done()])) == [Release, Moved, Finished]


def test_the_driver_must_answer_every_request_before_the_next() -> None:
    m = machine()
    m.observe(lease_gone=False, stop=False, checkpoint="TRIM_HORIZON")
    assert isinstance(m.next_action(NOW), CheckParents)
    with pytest.raises(ProtocolError):
        m.next_action(NOW)
    with pytest.raises(ProtocolError):
        m.observe(lease_gone=False, stop=False, checkpoint="TRIM_HORIZON")

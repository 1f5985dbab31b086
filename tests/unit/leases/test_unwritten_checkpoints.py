"""Regression tests for the lease core, continued: a checkpoint the leases table refused (throttled,
fenced, a take-back that landed but timed out) is never lost — it is written when the lease comes
back, or carried by the release — so the next owner does not replay what was processed. Each drives
the product's own classes on the in-memory store and a fake clock, and failed on the code before its fix."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.leases.errors import (
    LeaseError,
    LeaseLostError,
    LeaseStoreThrottledError,
    LeaseStoreUnavailableError,
)
from ground.clock import FakeClock
from tests.unit.leases.regression_rig import (
    ESN,
    HORIZON,
    SETTINGS,
    refused_for_now,
    table,
    throttled,
    timed_out_after_commit,
    worker,
)


def test_a_checkpoint_the_outage_refused_is_written_when_the_worker_takes_its_untouched_lease_back() -> None:
    """A leases-table outage fences a worker after it processed records it could not checkpoint. If
    it takes its lease back and nobody held it meanwhile, it records that position instead of
    replaying the records."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    refused_for_now(store, a, "s1", "200")
    clock.advance(SETTINGS.fence_after_millis + 1)  # the outage lasts: a is fenced
    assert not a.may_process("s1")
    assert a.heartbeat_once()
    a.take_round()
    (lease,) = a.held()
    assert lease.checkpoint == ESN("200") == store.get("s1").checkpoint  # type: ignore[union-attr]


def test_a_released_lease_carries_the_position_its_checkpoint_could_not_record_yet() -> None:
    """A checkpoint refused for now (throttled), then the lease is released (shed, a hand-over, an
    overdue hand-over): the position is written first, so the next owner starts after the records
    instead of replaying them (fault-model sweep, seed 1 011 575: one record replayed after a shed)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    refused_for_now(store, a, "s1", "200")
    a.release("s1")
    released = store.get("s1")
    assert released is not None and released.owner is None and released.checkpoint == ESN("200")


def test_an_unwritten_checkpoint_is_written_forward_when_the_lease_comes_back_after_another_held_it() -> None:
    """a processed to 200 but the table refused the checkpoint; b held the lease meanwhile and got
    to 150; the lease is handed back to a. a's position is ahead and its records are processed:
    it is written (forward only), so nothing up to 200 is delivered a third time."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    refused_for_now(store, a, "s1", "200")
    clock.advance(HORIZON + 1)
    b = worker(store, clock, "b")  # a looked dead: b took s1 and released it again
    b.checkpoint("s1", "150")
    b.release("s1")
    store.take(store.get("s1"), "a")  # handed to a (as a hand-over would)  # type: ignore[arg-type]
    assert a.heartbeat_once()
    a.take_round()
    (lease,) = a.held()
    assert lease.checkpoint == ESN("200") == store.get("s1").checkpoint  # type: ignore[union-attr]


def test_a_checkpoint_refused_because_the_fence_just_passed_is_written_when_the_lease_comes_back() -> None:
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    clock.advance(SETTINGS.fence_after_millis + 1)  # the batch landed; its checkpoint comes just too late
    with pytest.raises(LeaseLostError, match="fenced"):
        a.checkpoint("s1", "300")
    assert a.heartbeat_once()
    a.take_round()
    (lease,) = a.held()
    assert lease.checkpoint == ESN("300")  # not replayed from TRIM_HORIZON


def test_an_unwritten_checkpoint_survives_a_take_back_that_landed_but_timed_out() -> None:
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    refused_for_now(store, a, "s1", "200")
    clock.advance(SETTINGS.fence_after_millis + 1)
    assert a.heartbeat_once()
    store.hooks["take"] = timed_out_after_commit  # the take-back lands; its answer is a timeout
    a.take_round()
    assert a.held() == []
    a.take_round()  # the table says the lease is mine, one counter up: only my own take did that
    (lease,) = a.held()
    assert lease.checkpoint == ESN("200") == store.get("s1").checkpoint  # type: ignore[union-attr]


def test_an_unwritten_checkpoint_survives_its_own_failed_recording_after_a_take_back_that_landed() -> None:
    """Fenced with a position refused; the first attempt to record it is throttled; the take-back
    lands but is answered with a timeout. The next attempt to record the position meets the counter
    the take-back moved: the lease is still mine, so the position must be kept and written when the
    lease comes back, not forgotten (slow-table chaos, seed 2 of a later run: 10 records twice)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    clock.advance(SETTINGS.fence_after_millis + 1)  # fenced: the checkpoint of a processed batch is refused
    with pytest.raises(LeaseLostError):
        a.checkpoint("s1", "200")
    assert a.heartbeat_once()
    store.hooks["checkpoint"] = throttled  # recording the position is throttled this round
    store.hooks["take"] = timed_out_after_commit  # and the take-back lands, answered with a timeout
    a.take_round()
    assert a.held() == []
    a.take_round()  # recording meets the moved counter; the take-back then writes the position
    (lease,) = a.held()
    assert lease.checkpoint == ESN("200") == store.get("s1").checkpoint  # type: ignore[union-attr]


def test_a_fenced_worker_records_what_it_processed_so_the_next_owner_does_not_replay_it() -> None:
    """The table throttled a's checkpoint, then a was fenced. Once the table answers again, a records
    that position under the counter it held (nobody took the lease yet), and b, taking over from the
    silent a, starts after it."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    refused_for_now(store, a, "s1", "200")
    clock.advance(SETTINGS.fence_after_millis + 1)
    a.take_round()  # fenced: it takes nothing, but it records what it processed
    assert store.get("s1").checkpoint == ESN("200")  # type: ignore[union-attr]
    clock.advance(HORIZON)
    b = worker(store, clock, "b")
    (lease,) = b.held()
    assert lease.checkpoint == ESN("200")


def test_a_checkpoint_refused_for_now_moves_the_held_lease_so_the_next_consumer_starts_after_it() -> None:
    """The table refuses a checkpoint for now while the worker holds the lease: the records are
    processed, so the lease as held says so — a shard consumer started next under the same ownership
    (the scheduler stopped the last one during a fence the worker came back from) resumes after them
    instead of replaying them; the table still has the last position written until the next
    checkpoint (whole-worker simulator, seed 768 of its first sweep)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    refused_for_now(store, a, "s1", "200")
    (lease,) = a.held()
    assert lease.checkpoint == ESN("200") and store.get("s1").checkpoint == ESN("100")  # type: ignore[union-attr]
    a.checkpoint("s1", "250")  # the next checkpoint writes past it as usual
    assert store.get("s1").checkpoint == ESN("250")  # type: ignore[union-attr]


def test_a_checkpoint_refused_after_my_take_back_moved_the_counter_still_moves_the_held_lease() -> None:
    """The worker stops with a checkpoint in flight, past its fence; back, it takes its untouched lease
    back (the counter moves, the ownership goes on), and only then does the refusal (throttled) come
    back for the write sent under the old counter. The position is kept on the lease held now, under
    the same ownership (whole-worker simulator, seed 1144 of its first sweep)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    (before,) = a.held()

    def taken_back_then_throttled(call: Any) -> Any:
        clock.advance(SETTINGS.fence_after_millis + 1)  # stopped with the write in flight: fenced
        assert a.heartbeat_once()
        a.take_round()  # takes its untouched lease back
        return throttled(call)

    store.hooks["checkpoint"] = taken_back_then_throttled
    with pytest.raises(LeaseStoreThrottledError):
        a.checkpoint("s1", "200", before.counter)
    (lease,) = a.held()
    assert lease.counter > before.counter and lease.checkpoint == ESN("200")


def test_a_position_refused_while_a_take_back_records_the_fenced_one_is_not_forgotten() -> None:
    """The table refused 200 for now; the worker is fenced; taking its untouched lease back, it
    records 200 — and while that write is on its way, its shard consumer's checkpoint of 300 is
    refused by the fence and noted. Recording 200 must not forget 300: the next consumer starts after
    300 (whole-worker simulator, seed 4 503 of its second sweep: a record replayed by the same worker)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    (held,) = a.held()
    refused_for_now(store, a, "s1", "200")
    clock.advance(SETTINGS.fence_after_millis + 1)  # fenced with 200 unwritten

    def consumer_refused_meanwhile(call: Any) -> Any:
        with pytest.raises(LeaseLostError):
            a.checkpoint("s1", "300", held.counter)  # the consumer's next checkpoint: refused by the fence
        return call()

    store.hooks["checkpoint"] = consumer_refused_meanwhile
    assert a.heartbeat_once()
    a.take_round()  # records 200 (the hook runs inside that write), then takes the lease back
    (lease,) = a.held()
    assert lease.checkpoint == ESN("300"), "the position refused meanwhile was forgotten"
    assert store.get("s1").checkpoint == ESN("300")  # type: ignore[union-attr]  # written at the take-back


def test_a_checkpoint_refused_because_a_hand_over_is_overdue_is_recorded_when_the_lease_goes() -> None:
    """A thief asked for the lease and the hand-over is overdue (the worker was stopped): processing
    must stop and the checkpoint is refused — but the records up to it are processed. The release
    that follows records the position (conditional on the worker's counter) rather than leaving them
    to be replayed (whole-worker simulator, seed 6 025 of its third sweep: the thief never came, the
    worker took the lease back and replayed a batch its class-form processor had checkpointed)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    a.holdings.ask_hand_over("s1", "b", clock.wall_millis() - 1)  # asked long ago: overdue now
    with pytest.raises(LeaseLostError, match="overdue"):
        a.checkpoint("s1", "200")
    a.release("s1")
    assert store.get("s1").checkpoint == ESN("200")  # type: ignore[union-attr]


def test_a_position_the_table_refused_is_written_when_the_worker_takes_the_lease_again_from_nobody() -> None:
    """a processed to 200 but the table refused the checkpoint, then a was fenced; b took the lease
    (a looked dead) and released it without processing. The lease is free when a tries to record 200
    (refused: not a's counter any more), and a takes it from nobody in the same round: it starts after
    200, not at 100 (long-form whole-worker seeds 1 014 485 and 1 018 069: the position was forgotten
    when the table showed the lease free, and the worker that took it again replayed the records)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    refused_for_now(store, a, "s1", "200")
    store.hooks.pop("checkpoint", None)
    clock.advance(HORIZON + 1)  # a is fenced, and looks dead
    b = worker(store, clock, "b")
    b.release("s1")
    b.stop_taking()
    assert a.heartbeat_once()
    a.take_round()
    (lease,) = a.held()
    assert lease.checkpoint == ESN("200") == store.get("s1").checkpoint  # type: ignore[union-attr]


def test_a_checkpoint_that_arrives_after_the_worker_gave_the_lease_up_is_written_when_it_takes_it_again() -> (
    None
):
    """An overdue hand-over released the lease while a lane's checkpoint was still on its way; the
    records up to it are processed. The checkpoint is refused (the lease is not held) but its position
    is kept, and a take of the free lease starts after it (directed history at 9.9 s: record 2640
    replayed before)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    a.release("s1")
    with pytest.raises(LeaseLostError, match="given up"):
        a.checkpoint("s1", "200")
    assert a.heartbeat_once()
    a.take_round()
    (lease,) = a.held()
    assert lease.checkpoint == ESN("200") == store.get("s1").checkpoint  # type: ignore[union-attr]


def test_a_checkpoint_refused_after_a_new_ownership_of_mine_was_adopted_moves_the_lease_held_now() -> None:
    """The worker stops with a checkpoint of 200 in flight, past its fence. Back, its first take-back
    lands but is answered with a timeout, so the next round adopts the lease at a counter it never
    held: a new ownership, not the one the write was sent under. Only then is the write refused (the
    counter moved). The records up to 200 were processed here: the lease held now says 200, so the
    next shard consumer starts after them and its checkpoint or release writes them, instead of
    replaying them from 100."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    (before,) = a.held()

    def adopted_anew_then_refused(call: Any) -> Any:
        clock.advance(SETTINGS.fence_after_millis + 1)  # stopped with the write in flight: fenced
        assert a.heartbeat_once()
        store.hooks["take"] = timed_out_after_commit  # the take-back lands; its answer is a timeout
        a.take_round()
        assert a.held() == []
        a.take_round()  # adopts the lease the table says is mine, at a counter it never held
        return call()  # the write sent under the old counter lands now: refused

    store.hooks["checkpoint"] = adopted_anew_then_refused
    with pytest.raises(LeaseLostError):
        a.checkpoint("s1", "200", before.counter)
    (lease,) = a.held()
    assert lease.counter > before.counter + 1  # two takes since: a new ownership
    assert lease.checkpoint == ESN("200"), "the next consumer would replay the records from 100"
    assert store.get("s1").checkpoint == ESN("100")  # type: ignore[union-attr]  # written by what follows
    a.release("s1")
    assert store.get("s1").checkpoint == ESN("200")  # type: ignore[union-attr]


@pytest.mark.parametrize("landed", [True, False], ids=["landed-answer-late", "lands-after"])
def test_a_release_while_a_checkpoint_is_on_its_way_records_that_position_never_an_earlier_one(
    landed: bool,
) -> None:
    """A lane's checkpoint of 200 is on its way when a graceful stop releases the lease, which
    carries 170, refused for now earlier. Recording 170 after 200 landed would move the checkpoint
    back; recording it when 200 lands later (refused, the counter moved) would replay 171..200. The
    release records 200: it was asked for, so its records are processed (whole-worker history
    1 014 061, lanes: 2600 landed, its answer timed out, then the release recorded 2570)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    a.checkpoint("s1", "100")
    refused_for_now(store, a, "s1", "170")

    def released_meanwhile(call: Any) -> Any:
        if landed:
            call()
        a.release("s1")  # the stop's release, the lane's shard consumer not finished yet
        if landed:
            raise LeaseStoreUnavailableError("read timeout (the write had committed)")
        return call()  # the counter moved: refused

    store.hooks["checkpoint"] = released_meanwhile
    with pytest.raises(LeaseError):
        a.checkpoint("s1", "200")
    released = store.get("s1")
    assert released is not None and released.owner is None
    assert released.checkpoint == ESN("200")

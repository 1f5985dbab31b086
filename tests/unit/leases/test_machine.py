"""The lease machine on its own: inputs in, requests and notes out, time passed in -- no store, no
clock, no thread. And its driver: the lock is held around steps only, never across a call."""

from __future__ import annotations

import random

import pytest

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.decisions import Timing
from consumer.leases.errors import HeartbeatConflictError, LeaseLostError, LeaseStoreThrottledError
from consumer.leases.machine.actions import (
    Announce,
    Checkpoint,
    Conversation,
    Done,
    Get,
    Now,
    PutHeartbeat,
    Release,
    Reply,
    Request,
    Scan,
    ScanWorkers,
    Take,
    Timed,
    advance,
)
from consumer.leases.machine.machine import LeaseMachine
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease, Snapshot
from ground.clock import FakeClock
from ground.settings import WorkerSettings

SETTINGS = WorkerSettings()  # fence 8 s after a heartbeat's start
WALL = 1_700_000_000_000
FREE = Lease("s1", None, 0, ExtendedSequenceNumber("100"))


def machine() -> LeaseMachine:
    return LeaseMachine("me", SETTINGS, Timing.of(SETTINGS), Now(0, WALL), rng=random.Random(0))


def answer(m: LeaseMachine, conversation: Conversation[object], reply: Reply, at: int) -> object:
    """Feed ``reply`` at monotonic ``at`` (wall: WALL + at); the next request, or Done."""
    m.tick(Now(at, WALL + at))
    return advance(conversation, reply)


def beaten(m: LeaseMachine, at: int = 0) -> None:
    beat = m.heartbeat()
    m.tick(Now(at, WALL + at))
    assert isinstance(advance(beat, None), PutHeartbeat)
    assert answer(m, beat, Reply(()), at + 10) == Done(True)


def holding_s1() -> LeaseMachine:
    m = machine()
    beaten(m)
    round_ = m.take_round()
    assert advance(round_, None) == Scan()  # the first round scans the whole table
    me = Heartbeat("me", 1, WALL)
    taken = Lease("s1", "me", 1, FREE.checkpoint)
    assert answer(m, round_, Reply(Snapshot({"s1": FREE}, {"me": me})), 20) == Take(FREE, "me")
    assert isinstance(answer(m, round_, Reply(taken), 30), Done)
    assert Announce("taken", "s1", taken) in m.notes()
    return m


def test_a_heartbeat_is_a_conditional_put_and_its_answer_sets_the_fence_from_its_start() -> None:
    m = machine()
    assert m.fenced()  # nothing may be processed before the first heartbeat landed
    beat = m.heartbeat()
    m.tick(Now(1_000, WALL + 1_000))
    assert advance(beat, None) == PutHeartbeat(Heartbeat("me", 1, WALL + 1_000, 0, False, 0), None, ())
    assert answer(m, beat, Reply(()), 1_500) == Done(True)
    assert any(isinstance(n, Timed) and n.name == "RenewLease" and n.millis == 500 for n in m.notes())
    m.tick(Now(1_000 + SETTINGS.fence_after_millis - 1, WALL))
    assert not m.fenced()
    m.tick(Now(1_000 + SETTINGS.fence_after_millis, WALL))
    assert m.fenced()  # at the deadline counted from the start, not from the answer


def test_a_heartbeat_that_meets_its_own_retried_write_is_a_success() -> None:
    m = machine()
    beat = m.heartbeat()
    put = advance(beat, None)
    assert isinstance(put, PutHeartbeat)
    retried = Reply(error=HeartbeatConflictError("me", put.beat))
    assert answer(m, beat, retried, 10) == Done(True)
    assert m.state.row.counter == 1


def test_a_round_takes_a_free_lease_and_announces_it() -> None:
    m = holding_s1()
    assert [lease.shard_id for lease in m.held()] == ["s1"]
    assert m.may_process("s1")


def test_the_last_round_whose_reads_succeeded_is_said_on_the_next_beat() -> None:
    """The instances' watchdogs count a worker as fine by it (deploy/watchdog.py reads
    ``leaseRoundOkAt``): a row keeps being written while every round fails, so a failed round leaves
    it where the last good one put it."""
    m = holding_s1()  # its round's scan was answered at 20
    failed = m.take_round()
    m.tick(Now(1_000, WALL + 1_000))
    assert isinstance(advance(failed, None), (Scan, ScanWorkers))
    assert answer(m, failed, Reply(error=LeaseStoreThrottledError("throttled")), 1_010) == Done(None)
    beat = m.heartbeat()
    m.tick(Now(1_100, WALL + 1_100))
    put = advance(beat, None)
    assert isinstance(put, PutHeartbeat) and put.beat.round_ok_at_wall_millis == WALL + 20


def test_a_take_answered_after_the_fence_it_was_sent_under_is_not_used() -> None:
    m = machine()
    beaten(m)
    round_ = m.take_round()
    advance(round_, None)
    me = Heartbeat("me", 1, WALL)
    assert answer(m, round_, Reply(Snapshot({"s1": FREE}, {"me": me})), 20) == Take(FREE, "me")
    late = SETTINGS.fence_after_millis + 1  # the answer comes after a pause past the deadline
    assert isinstance(answer(m, round_, Reply(Lease("s1", "me", 1, FREE.checkpoint)), late), Done)
    assert not any(isinstance(n, Announce) and n.kind == "taken" for n in m.notes())
    assert m.held() == []


def test_a_checkpoint_the_table_refused_for_now_is_kept_on_the_held_lease() -> None:
    m = holding_s1()
    checkpoint = m.checkpoint("s1", "200")
    held = m.state.holdings.leases()[0]
    assert advance(checkpoint, None) == Checkpoint(held, ExtendedSequenceNumber("200"))
    with pytest.raises(LeaseStoreThrottledError):
        answer(m, checkpoint, Reply(error=LeaseStoreThrottledError("throttled")), 40)
    assert m.held()[0].checkpoint == ExtendedSequenceNumber("200")  # the next consumer starts after it


def test_a_checkpoint_after_the_fence_makes_no_request_and_is_kept() -> None:
    m = holding_s1()
    m.tick(Now(SETTINGS.fence_after_millis, WALL + SETTINGS.fence_after_millis))
    with pytest.raises(LeaseLostError, match="fenced"):
        advance(m.checkpoint("s1", "300"), None)
    notes = m.notes()
    assert Announce("lost", "s1", None) in notes
    assert [(lease.shard_id, str(position)) for lease, position in m.state.holdings.unwritten_unheld()] == [
        ("s1", "300")
    ]


def test_the_driver_never_holds_its_lock_across_a_call_to_the_tables() -> None:
    class Watching(InMemoryLeaseStore):
        seen: list[bool]

        def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
            locked = coordinator._driver._lock.locked()
            self.seen.append(locked)
            if not locked:  # (held, this would deadlock)
                assert coordinator.may_process("s1")  # another step meanwhile
            return super().checkpoint(held, checkpoint)

    store = Watching()
    store.seen = []
    store.create_if_absent(FREE)
    coordinator = LeaseCoordinator(store, "me", SETTINGS, FakeClock())
    coordinator.heartbeat_once()
    coordinator.take_round()
    coordinator.checkpoint("s1", "200")
    assert store.seen == [False]


def test_every_request_the_machine_makes_is_one_the_driver_performs() -> None:
    """The vocabulary is closed: a request the driver would not know fails loudly, not silently."""

    class Unknown(Request[None]):
        pass

    coordinator = LeaseCoordinator(InMemoryLeaseStore(), "me", SETTINGS, FakeClock())
    with pytest.raises(TypeError, match="does not know"):
        coordinator._driver._call(Unknown())


def _round_over_a_lease_handed_to_me(stuck: frozenset[str]) -> Request[object]:
    """My first round, the table naming me owner of s1 (handed to me) and another worker alive; the
    request that follows the consistent read of s1."""
    m = machine()
    beaten(m)
    mine = Lease("s1", "me", 1, FREE.checkpoint)
    beats = {"me": Heartbeat("me", 1, WALL), "other": Heartbeat("other", 1, WALL)}
    round_ = m.take_round(stuck)
    assert advance(round_, None) == Scan()
    assert answer(m, round_, Reply(Snapshot({"s1": mine}, beats)), 20) == Get("s1")
    then = answer(m, round_, Reply(mine), 30)
    assert not isinstance(then, Done)
    return then


def test_a_lease_whose_stalled_call_is_stuck_here_is_released_free_not_adopted() -> None:
    """Which stalled calls are stuck is the stall mover's alone to say (LeaseCoordinator.ask_stuck_calls),
    given to each round: a lease handed to me meanwhile goes free again (a named worker may have a
    call stuck on it too), and once the call returned it is adopted as any lease of mine."""
    mine = Lease("s1", "me", 1, FREE.checkpoint)
    assert _round_over_a_lease_handed_to_me(frozenset({"s1"})) == Release(mine, None)
    assert _round_over_a_lease_handed_to_me(frozenset()) == Take(mine, "me")

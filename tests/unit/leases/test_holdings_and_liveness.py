"""Two parts of the lease machine on their own: Holdings (what a worker holds and until when it may
use it) and the heartbeat (its row, including writes that committed and failed), the latter driven
by the coordinator as one conversation."""

from __future__ import annotations

from typing import Any

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.errors import HeartbeatConflictError, LeaseStoreUnavailableError
from consumer.leases.machine import beating
from consumer.leases.machine.actions import Now
from consumer.leases.machine.beating import BeatResult
from consumer.leases.machine.holdings import LET_GO_REMEMBERED, Holdings
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease
from ground.clock import FakeClock
from ground.settings import WorkerSettings

FENCE = 8_000
LEASE = Lease("s1", "me", 3, ExtendedSequenceNumber("100"))


def test_nothing_is_held_before_the_first_heartbeat_nor_after_the_deadline() -> None:
    holdings = Holdings(FENCE)
    assert not holdings.add(LEASE, now_mono=0, sent_fence_at=holdings.fence_at())  # never renewed
    holdings.renewed(started_mono=1_000, now_mono=1_050)
    assert holdings.add(LEASE, now_mono=1_100, sent_fence_at=holdings.fence_at())
    assert holdings.get("s1", 8_999) == (LEASE, [])
    assert holdings.get("s1", 9_000) == (None, ["s1"])  # dropped at the deadline itself


def test_a_renewal_learnt_after_the_deadline_drops_first_then_extends() -> None:
    holdings = Holdings(FENCE)
    holdings.renewed(0, 10)
    holdings.add(LEASE, 20, holdings.fence_at())
    assert holdings.renewed(started_mono=7_000, now_mono=9_500) == ["s1"]  # started in time, landed late
    assert holdings.leases() == [] and not holdings.fenced(9_500)  # alive again, holding nothing


def test_a_take_answered_after_the_deadline_it_was_sent_under_is_refused() -> None:
    holdings = Holdings(FENCE)
    holdings.renewed(0, 10)
    sent = holdings.fence_at()  # 8 000
    holdings.renewed(9_000, 9_010)  # a pause, then a heartbeat moved the deadline on
    assert not holdings.add(LEASE, now_mono=9_020, sent_fence_at=sent)
    assert holdings.add(LEASE, now_mono=9_030, sent_fence_at=holdings.fence_at())
    assert not holdings.add(
        Lease("s2", "me", 1, ExtendedSequenceNumber("SHARD_END")), 9_040, holdings.fence_at()
    )


def test_a_scan_older_than_my_own_write_never_drops_a_lease() -> None:
    holdings = Holdings(FENCE)
    holdings.renewed(0, 10)
    holdings.add(LEASE, 20, holdings.fence_at())
    older = Lease("s1", "other", 2, ExtendedSequenceNumber("50"))  # before my take moved it to 3
    assert holdings.reconcile({"s1": older}, "me") == []
    assert holdings.reconcile({"s1": Lease("s1", "other", 4, ExtendedSequenceNumber("50"))}, "me") == ["s1"]


class Answers(InMemoryLeaseStore):
    """The table, with the next heartbeat's answer replaced by ``fault`` (after the write)."""

    def __init__(self) -> None:
        super().__init__()
        self.fault: str | None = None

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Any = ()
    ) -> tuple[HandOverRequest, ...]:
        fault, self.fault = self.fault, None
        answer = super().heartbeat(beat, expected_counter, clear)
        if fault == "retried":
            return super().heartbeat(beat, expected_counter, clear)  # the retry meets its own write
        if fault == "timeout":
            raise LeaseStoreUnavailableError("read timeout")
        return answer


class Liveness:
    """One worker's heartbeat conversation (consumer.leases.machine.beating.beat) on its own, driven
    by its coordinator; ``counter`` is the one its row holds, as far as it knows."""

    def __init__(self, coordinator: LeaseCoordinator) -> None:
        self._coordinator = coordinator

    def beat(self) -> BeatResult:
        return self._coordinator.drive(lambda machine: beating.beat(machine.state))

    @property
    def counter(self) -> int | None:
        return self._coordinator.machine.state.row.counter


def liveness(store: InMemoryLeaseStore, clock: FakeClock) -> tuple[Liveness, Holdings]:
    settings = WorkerSettings()  # fenced FENCE after a good heartbeat; requests settle at 10 500
    assert settings.fence_after_millis == FENCE and settings.expiry_horizon_millis == 10_500
    coordinator = LeaseCoordinator(store, "me", settings, clock)
    return Liveness(coordinator), coordinator.machine.state.holdings


def test_a_retried_heartbeat_that_meets_its_own_write_is_a_success_with_its_requests() -> None:
    store, clock = Answers(), FakeClock()
    live, _ = liveness(store, clock)
    assert live.beat().ok
    store.ask_hand_over("me", HandOverRequest("s1", "thief", clock.wall_millis()))
    store.fault = "retried"
    result = live.beat()
    assert result.ok and [r.shard_id for r in result.requests] == ["s1"]
    assert live.counter == 2


def test_a_timed_out_heartbeat_resynchronises_on_the_next_one() -> None:
    store, clock = Answers(), FakeClock()
    live, _ = liveness(store, clock)
    assert live.beat().ok
    store.fault = "timeout"
    assert not live.beat().ok  # it landed (counter 2), the answer did not
    clock.advance(1_000)
    assert live.beat().ok and live.counter == 3  # conflict -> my own row at 2 -> put again at 3


def test_a_removed_row_drops_everything_and_starts_a_new_one() -> None:
    store, clock = Answers(), FakeClock()
    live, holdings = liveness(store, clock)
    assert live.beat().ok
    holdings.add(LEASE, clock.monotonic_millis(), holdings.fence_at())
    store.delete_heartbeat(Heartbeat("me", 1, 0))  # another worker judged me dead
    result = live.beat()
    assert result.ok and result.dropped == ("s1",) and holdings.leases() == []
    try:
        store.heartbeat(Heartbeat("me", 1, 0), None)
    except HeartbeatConflictError as exc:
        assert exc.current is not None and exc.current.counter == 1  # the new row


def test_a_late_checkpoint_is_kept_for_the_latest_leases_given_up_only() -> None:
    """Leases given up are remembered for a checkpoint that arrives late, the latest
    LET_GO_REMEMBERED of them: a worker reading a stream for weeks lets go of thousands."""
    holdings = Holdings(FENCE)
    holdings.renewed(0, 10)
    count = LET_GO_REMEMBERED + 1
    for i in range(count):
        holdings.add(Lease(f"s{i}", "me", 1, ExtendedSequenceNumber("100")), 20, holdings.fence_at())
        holdings.remove(f"s{i}")
    assert not holdings.refused_after_letting_go("s0", ExtendedSequenceNumber("200"))
    assert holdings.refused_after_letting_go(f"s{count - 1}", ExtendedSequenceNumber("200"))
    assert [(lease.shard_id, position) for lease, position in holdings.unwritten_unheld()] == [
        (f"s{count - 1}", ExtendedSequenceNumber("200"))
    ]


def test_a_request_made_before_my_ownership_began_is_cleared_not_honoured() -> None:
    """A hand-over request left on my row from an earlier ownership (I handed the lease over, and
    got it back before my next beat cleared the request) must not send the lease back again: two
    workers passed one lease to and fro four times in a second in a demo run at e6c9929. A request
    within the clock skew of my take, or after it, is honoured."""
    store, clock = Answers(), FakeClock()
    coordinator = LeaseCoordinator(store, "me", WorkerSettings(), clock)
    state = coordinator.machine.state
    skew = state.settings.max_clock_skew_millis

    def heartbeat() -> bool:
        return coordinator.drive(lambda machine: beating.heartbeat(machine.state))

    assert heartbeat()
    clock.advance(2_000)
    taken_wall = clock.wall_millis()
    state.now = Now(clock.monotonic_millis(), taken_wall)  # the time of the take's step
    for shard in ("old", "edge", "new"):
        assert state.hold(
            Lease(shard, "me", 3, ExtendedSequenceNumber("100")), "took", state.holdings.fence_at()
        )
    store.ask_hand_over("me", HandOverRequest("old", "thief", taken_wall - skew - 1))
    store.ask_hand_over("me", HandOverRequest("edge", "thief", taken_wall - skew))
    clock.advance(100)
    store.ask_hand_over("me", HandOverRequest("new", "thief", clock.wall_millis()))
    assert heartbeat()
    assert state.holdings.thief("old") is None and state.holdings.hand_over_deadline("old") is None
    assert state.holdings.thief("edge") == "thief" and state.holdings.thief("new") == "thief"
    assert heartbeat()  # the beat after clears the old request from the row, keeps the others
    assert sorted(r.shard_id for r in state.row.on_row) == ["edge", "new"]

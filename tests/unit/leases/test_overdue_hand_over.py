"""An overdue hand-over waits for the delivery in progress (issue 46: the chaos demo, factor 10,
pause-heavy schedule, two runs of two with 7 unexplained duplicates).

A worker asked for a lease hands it over after its batch in flight; when that takes longer than
failover - margin (a pause, a slow downstream) the hand-over is overdue and the lease is released.
It was released at once, while lanes were still handling records beyond the checkpoint: their
checkpoint came after the release, was refused, and the thief delivered those records again. Now
the release waits until the delivery has returned and records the position it reached first."""

from __future__ import annotations

import pytest

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.errors import LeaseLostError
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from ground.clock import FakeClock
from ground.settings import WorkerSettings

SETTINGS = WorkerSettings(failover_time_millis=3_000)
SHARD = "s0"


def _owner_asked_by_thief() -> tuple[InMemoryLeaseStore, FakeClock, LeaseCoordinator, LeaseCoordinator]:
    store, clock = InMemoryLeaseStore(), FakeClock()
    store.create_if_absent(Lease(SHARD, None, 0, ExtendedSequenceNumber("100")))
    owner = LeaseCoordinator(store, "owner", SETTINGS, clock)
    owner.heartbeat_once()
    owner.take_round()
    assert [lease.shard_id for lease in owner.held()] == [SHARD]
    thief = LeaseCoordinator(store, "thief", SETTINGS, clock)
    thief.heartbeat_once()
    # The thief's request, as the owner's heartbeat brings it: hand over by failover - margin.
    owner.holdings.ask_hand_over(SHARD, "thief", owner.machine.state.stop_by(clock.wall_millis()))
    owner.take_round()  # the owner sees the thief alive
    return store, clock, owner, thief


def _past_overdue(clock: FakeClock, owner: LeaseCoordinator, thief: LeaseCoordinator) -> None:
    """Time passes past the hand-over's deadline and the margin after it, both workers' heartbeats
    landing as usual (the thief is alive and the owner unfenced: only the hand-over is late)."""
    step = SETTINGS.renewal_interval_millis // 2
    for _ in range((SETTINGS.fence_after_millis + SETTINGS.fence_margin_millis) // step + 2):
        clock.advance(step)
        owner.heartbeat_once()
        thief.heartbeat_once()


def test_the_release_waits_for_the_delivery_and_records_what_its_lanes_handled() -> None:
    store, clock, owner, thief = _owner_asked_by_thief()
    with owner.delivering(SHARD):
        _past_overdue(clock, owner, thief)
        owner.take_round()  # the round that finds the hand-over overdue
        assert store.get(SHARD).owner == "owner", "released under a delivery in progress"
        # The lanes finish their records after the deadline: their checkpoint is refused, and noted.
        with pytest.raises(LeaseLostError):
            owner.checkpoint(SHARD, "300")
    lease = store.get(SHARD)
    assert lease.owner == "thief" and lease.checkpoint == ExtendedSequenceNumber("300")


def test_an_overdue_hand_over_with_nothing_being_delivered_is_released_at_the_round() -> None:
    store, clock, owner, thief = _owner_asked_by_thief()
    _past_overdue(clock, owner, thief)
    owner.take_round()
    assert store.get(SHARD).owner == "thief"


def test_a_delivery_that_returns_after_the_fence_drops_the_lease_and_releases_nothing() -> None:
    """The owner is frozen mid-delivery (SIGSTOP) past its fence and the hand-over's deadline. Back,
    the delivery returns first: the lease must be dropped by the fence, not released -- another
    worker may be taking it by expiry, and a release would hand the next owner a checkpoint the
    frozen worker never wrote (chaos seed 101 of issue 46's ten, on this change's first version)."""
    store, clock, owner, _thief = _owner_asked_by_thief()
    counter = store.get(SHARD).counter
    with owner.delivering(SHARD):
        clock.advance(SETTINGS.failover_time_millis + SETTINGS.fence_margin_millis)  # frozen
    assert owner.held() == []
    lease = store.get(SHARD)
    assert lease.owner == "owner" and lease.counter == counter, "a fenced worker wrote to the lease"


def test_a_request_seen_first_in_a_scan_wakes_the_shards_consumer_too() -> None:
    """A thief's request reaches the owner two ways: on its heartbeat row, and as the lease's pending
    owner in a scan. Whichever comes first must announce it ('asked': the consumer hands over now);
    the scan's way did not, and a consumer in its idle back-off ran the hand-over overdue (chaos
    seed 105 of issue 46's ten)."""
    store, clock = InMemoryLeaseStore(), FakeClock()
    store.create_if_absent(Lease(SHARD, None, 0, ExtendedSequenceNumber("100")))
    owner = LeaseCoordinator(store, "owner", SETTINGS, clock)
    events: list[tuple[str, str]] = []
    owner.add_listener(lambda event: events.append((event.kind, event.shard_id)))
    owner.heartbeat_once()
    owner.take_round()
    thief = LeaseCoordinator(store, "thief", SETTINGS, clock)
    thief.heartbeat_once()
    store.request_steal(store.get(SHARD), "thief", clock.wall_millis())  # the lease's mark only
    clock.advance(SETTINGS.full_scan_interval_millis)  # the owner's next round scans the table
    owner.heartbeat_once()
    owner.take_round()
    assert ("asked", SHARD) in events


def test_a_checkpoint_answered_after_an_overdue_release_to_nobody_is_written_when_the_lease_is_taken_again() -> (
    None
):
    """The thief asked and is gone (its row retired); the owner's hand-over runs overdue and the
    lease is released free. A lane's checkpoint then comes back (answered late, after the release):
    refused, its records handled all the same. The owner's next round finds the lease free, takes
    it from nobody, and must start after those records: the position is kept while the lease is
    free (not forgotten when recording it is refused because the owner changed) and written by the
    take (free_lease_keeps_position; in the whole worker the overdue release now waits for the
    delivery, so the directed history of test_directed_hand_over.py no longer reaches this)."""
    store, clock, owner, thief = _owner_asked_by_thief()
    thief.stop(release=True)  # SIGTERM: its heartbeat row goes
    step = SETTINGS.renewal_interval_millis // 2
    for _ in range((SETTINGS.fence_after_millis + SETTINGS.fence_margin_millis) // step + 2):
        clock.advance(step)
        owner.heartbeat_once()
    owner.take_round()  # the hand-over is overdue: released, to nobody
    assert store.get(SHARD).owner is None, "the overdue hand-over was not released free"
    with pytest.raises(LeaseLostError):
        owner.checkpoint(SHARD, "300")  # a lane's checkpoint, answered after the release
    for _ in range(SETTINGS.full_scan_interval_millis // step + 2):
        clock.advance(step)
        owner.heartbeat_once()
        owner.take_round()
    lease = store.get(SHARD)
    assert lease.owner == "owner", "the owner never took the free lease again"
    assert lease.checkpoint == ExtendedSequenceNumber("300"), "the records up to 300 would be handled again"

"""The coordinator's promises to the lifecycle, on the in-memory store and a fake clock (no threads):
listener events, checkpoint forms, fencing, cleanup by id, back-off when the table fails."""

from __future__ import annotations

import pytest

from consumer.leases.coordinator import LeaseCoordinator, LeaseEvent
from consumer.leases.errors import CheckpointRefusedError, LeaseLostError
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from ground.clock import FakeClock
from ground.positions import SHARD_END
from ground.settings import WorkerSettings

ESN = ExtendedSequenceNumber
SETTINGS = WorkerSettings()  # failover 10 s, renewal 3308 ms, taker 3333 ms


def started(
    store: InMemoryLeaseStore, clock: FakeClock, name: str
) -> tuple[LeaseCoordinator, list[LeaseEvent]]:
    coordinator = LeaseCoordinator(store, name, SETTINGS, clock)
    events: list[LeaseEvent] = []
    coordinator.add_listener(events.append)
    coordinator.heartbeat_once()
    coordinator.take_round()
    return coordinator, events


def table(*shards: str) -> InMemoryLeaseStore:
    store = InMemoryLeaseStore()
    for shard in shards:
        store.create_if_absent(Lease(shard, None, 0, ESN("TRIM_HORIZON")))
    return store


def test_listener_hears_taken_finished_and_released() -> None:
    store, clock = table("s1", "s2"), FakeClock()
    a, events = started(store, clock, "a")
    assert sorted((e.kind, e.shard_id) for e in events) == [("taken", "s1"), ("taken", "s2")]
    events.clear()
    a.checkpoint("s1", ESN(SHARD_END))
    a.release("s2")
    assert [(e.kind, e.shard_id) for e in events] == [("finished", "s1"), ("released", "s2")]
    assert store.get("s2") is not None and store.get("s2").owner is None  # type: ignore[union-attr]


def test_listener_hears_lost_when_a_lease_is_taken_after_a_pause() -> None:
    store, clock = table("s1"), FakeClock()
    a, events = started(store, clock, "a")
    clock.advance(SETTINGS.failover_time_millis + SETTINGS.max_clock_skew_millis + 1)  # a is frozen
    b, _ = started(store, clock, "b")
    assert [lease.shard_id for lease in b.held()] == ["s1"]
    events.clear()
    assert not a.may_process("s1")  # fenced long before b could take it: dropped at once
    assert [(e.kind, e.shard_id) for e in events] == [("lost", "s1")]
    a.take_round()  # a wakes up and scans: nothing more to announce
    assert [(e.kind, e.shard_id) for e in events] == [("lost", "s1")]
    with pytest.raises(LeaseLostError):
        a.checkpoint("s1", "100")


def test_checkpoint_accepts_text_and_extended_numbers_and_never_moves_back() -> None:
    store, clock = table("s1"), FakeClock()
    a, _ = started(store, clock, "a")
    a.checkpoint("s1", "200")
    a.checkpoint("s1", ESN("200", 3))
    assert store.get("s1").checkpoint == ESN("200", 3)  # type: ignore[union-attr]
    with pytest.raises(CheckpointRefusedError, match="move back"):
        a.checkpoint("s1", "199")
    with pytest.raises(ValueError, match="neither digits"):
        a.checkpoint("s1", "12ab")
    assert store.get("s1").checkpoint == ESN("200", 3)  # type: ignore[union-attr]


def test_delete_lease_removes_only_finished_leases() -> None:
    store, clock = table("s1", "s2"), FakeClock()
    a, _ = started(store, clock, "a")
    a.checkpoint("s1", SHARD_END)
    assert a.delete_lease("s2") is False and store.get("s2") is not None
    assert a.delete_lease("s1") is True and store.get("s1") is None
    assert a.delete_lease("s1") is False


def test_taker_backs_off_while_the_table_fails_and_keeps_its_leases() -> None:
    """A failing table is read half as often, but the wait never outgrows one taker interval: when
    the outage ends, the leases are taken up within one interval (the Java KCL's back-off, and ours
    before, grew to the failover time: three intervals)."""
    store, clock = table("s1"), FakeClock()
    a, events = started(store, clock, "a")
    interval = SETTINGS.taker_interval_millis
    assert a.taker_wait_millis() == interval // 2  # rounds every half interval (a workers-table read)
    store.unavailable = True
    waits = []
    for _ in range(4):
        assert a.take_round() is None
        waits.append(a.taker_wait_millis())
    assert waits == [interval] * 4
    assert [lease.shard_id for lease in a.held()] == ["s1"]  # nothing dropped for a failed scan
    store.unavailable = False
    a.take_round()
    assert a.taker_wait_millis() == interval // 2
    assert [e.kind for e in events] == ["taken"]


def test_a_failing_listener_does_not_break_the_coordinator() -> None:
    store, clock = table("s1"), FakeClock()
    a = LeaseCoordinator(store, "a", SETTINGS, clock)

    def broken(_event: LeaseEvent) -> None:
        raise RuntimeError("listener bug")

    a.add_listener(broken)
    a.heartbeat_once()
    a.take_round()
    assert [lease.shard_id for lease in a.held()] == ["s1"]


def test_a_worker_back_from_a_pause_readopts_with_a_new_counter_so_a_delayed_take_fails() -> None:
    """B judged A dead from a scan, then stalled before its take; A came back and re-adopted its
    lease meanwhile. B's late take must lose, or both would process the shard."""
    from consumer.leases.errors import LeaseConflictError

    store, clock = table("s1"), FakeClock()
    a, events = started(store, clock, "a")
    clock.advance(SETTINGS.failover_time_millis + SETTINGS.max_clock_skew_millis + 1)  # a was frozen
    b = LeaseCoordinator(store, "b", SETTINGS, clock)
    b.heartbeat_once()
    stale_view = store.scan().leases["s1"]  # b's scan: owner a, whose heartbeat is too old
    a.heartbeat_once()  # a wakes up: fenced, forgets s1, heartbeats again
    a.take_round()  # ... and re-adopts s1 after a consistent read
    assert a.may_process("s1")
    with pytest.raises(LeaseConflictError):
        store.take(stale_view, "b")  # b's take, finally sent
    assert store.get("s1").owner == "a"  # type: ignore[union-attr]
    assert [(e.kind, e.shard_id) for e in events][-2:] == [("lost", "s1"), ("taken", "s1")]


def test_malformed_items_are_reported_as_a_metric_and_left_alone() -> None:
    class Gauges:
        def __init__(self) -> None:
            self.values: dict[str, float] = {}

        def count(
            self,
            operation: str,
            name: str,
            value: float = 1,
            unit: str = "Count",
            shard_id: str | None = None,
        ) -> None:
            self.values[name] = self.values.get(name, 0) + value

        def gauge(
            self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None
        ) -> None:
            self.values[name] = value

        def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
            pass

    from consumer.leases.model import MalformedItem, Snapshot

    class WithBadItem(InMemoryLeaseStore):
        def scan(self) -> Snapshot:
            good = super().scan()
            bad = MalformedItem("shard-x", "attribute 'leaseCounter' has type S, expected N")
            return Snapshot(good.leases, good.heartbeats, (bad,))

    store = WithBadItem()
    store.create_if_absent(Lease("s1", None, 0, ESN("TRIM_HORIZON")))
    metrics = Gauges()
    a = LeaseCoordinator(store, "a", SETTINGS, FakeClock(), metrics=metrics)
    a.heartbeat_once()
    a.take_round()
    assert metrics.values["MalformedLeases"] == 1
    assert [lease.shard_id for lease in a.held()] == ["s1"]
    assert metrics.values["CurrentLeases"] == 0  # the gauge of the heartbeat before the take
    a.heartbeat_once()
    assert metrics.values["CurrentLeases"] == 1


def test_an_unhonoured_hand_over_is_forced_only_after_the_owner_stopped() -> None:
    """The owner's lifecycle never hands the lease over (stuck in a batch). The owner learns of the
    request with its next heartbeat, stops processing and checkpointing at failover - margin, and only
    then, after failover + skew, may the thief take the lease by force."""
    store, clock = table("s1", "s2"), FakeClock()
    a, _ = started(store, clock, "a")  # a holds both
    b, _ = started(store, clock, "b")  # b holds none, nothing free: asks a for one
    asked = next(store.get(x.shard_id) for x in a.held() if store.get(x.shard_id).pending_owner == "b")  # type: ignore[union-attr]
    assert asked is not None and asked.pending_owner == "b"
    shard = asked.shard_id
    assert a.may_process(shard) and not a.handoff_requested(shard)
    a.heartbeat_once()  # the request rides on a's heartbeat
    assert a.handoff_requested(shard) and a.may_process(shard)
    stop_at = asked.pending_since + SETTINGS.failover_time_millis - a.fence_margin_millis  # type: ignore[operator]
    force_at = asked.pending_since + SETTINGS.failover_time_millis + SETTINGS.max_clock_skew_millis  # type: ignore[operator]
    timeline: list[tuple[int, bool, str | None]] = []
    while clock.wall_millis() <= force_at + SETTINGS.taker_interval_millis:
        clock.advance(100)
        for worker in (a, b):
            if clock.monotonic_millis() % SETTINGS.renewal_interval_millis < 100:
                worker.heartbeat_once()
        if clock.monotonic_millis() % SETTINGS.taker_interval_millis < 100:
            b.take_round()
        timeline.append((clock.wall_millis(), a.may_process(shard), store.get(shard).owner))  # type: ignore[union-attr]
    a_stopped = min(t for t, processing, _ in timeline if not processing)
    b_took = min(t for t, _, owner in timeline if owner == "b")
    assert a_stopped <= stop_at + 100
    assert b_took > force_at
    assert b_took - a_stopped >= a.fence_margin_millis
    with pytest.raises(LeaseLostError, match="overdue|checkpoint"):
        a.checkpoint(shard, "10")
    other = next(s for s in ("s1", "s2") if s != shard)
    assert a.may_process(other)  # only the asked-for lease is fenced


def test_a_thief_awaiting_a_hand_over_looks_every_quarter_interval_until_it_is_adopted() -> None:
    """The owner hands an asked-for lease over once its batch in flight is done: the thief looks
    every quarter interval (a full scan each, as for a stopping worker's hand-overs) rather than every
    half, so the shard pauses a quarter interval less (a rolling deploy's thief took one up 2 s after
    its owner let it go). Once adopted, back to half an interval."""
    store, clock = table("s1", "s2"), FakeClock()
    a, _ = started(store, clock, "a")
    b = LeaseCoordinator(store, "b", SETTINGS, clock)
    interval = SETTINGS.taker_interval_millis
    b.heartbeat_once()
    b.take_round()  # asks a for one lease
    assert b.taker_wait_millis() == interval // 4
    a.heartbeat_once()
    shard = next(lease.shard_id for lease in a.held() if a.handoff_requested(lease.shard_id))
    a.release(shard)  # the owner's batch is done: handed to the thief
    b.take_round()
    assert [lease.shard_id for lease in b.held()] == [shard]
    assert b.taker_wait_millis() == interval // 2


def test_a_lease_asked_for_by_a_thief_that_died_is_released_not_stranded() -> None:
    store, clock = table("s1", "s2"), FakeClock()
    a, events = started(store, clock, "a")
    b = LeaseCoordinator(store, "b", SETTINGS, clock)
    b.heartbeat_once()
    b.take_round()  # asks a for one lease, then dies
    a.heartbeat_once()
    shard = next(lease.shard_id for lease in a.held() if a.handoff_requested(lease.shard_id))
    for _ in range(4):  # a keeps heartbeating and scanning; b is silent
        clock.advance(SETTINGS.taker_interval_millis)
        a.heartbeat_once()
        a.take_round()
    assert shard not in [lease.shard_id for lease in a.held()]
    assert ("released", shard) in [(e.kind, e.shard_id) for e in events]
    c, _ = started(store, clock, "c")
    assert shard in [lease.shard_id for lease in c.held()]

"""Regression tests for the lease core under DynamoDB as it really behaves (issue: "Lease core under a
real DynamoDB"). Each test is named after what it protects, drives the product's own classes on the
in-memory store and a fake clock, and injects one real-world behaviour: a slow call, a stale scan, a
write that commits and still fails, a paused worker. Each failed on the code before the fix."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from consumer.leases.advice import capacity_advice
from consumer.leases.coordinator import LeaseCoordinator, LeaseEvent
from consumer.leases.errors import LeaseLostError
from consumer.leases.model import (
    SHARD_END,
    Snapshot,
)
from consumer.streams.source import Position
from ground import clock as clock_module
from ground.clock import FakeClock, SystemClock
from ground.settings import Settings, WorkerSettings
from tests.unit.leases.regression_rig import (
    ESN,
    FAILOVER,
    HORIZON,
    SETTINGS,
    RecordingMetrics,
    retried_after_commit,
    table,
    timed_out_after_commit,
    worker,
)
from tools.planning import make_plan

# ------------------------------------------------------------------------------ defect 1


def test_a_heartbeat_landing_after_the_fence_deadline_never_re_enables_a_taken_lease() -> None:
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    assert a.may_process("s1")
    clock.advance(FAILOVER - 2_500)  # a's heartbeats failed so far; a new one starts before the fence

    def slow_heartbeat(call: Callable[[], Any]) -> Any:
        clock.advance(3_100)  # the call is slow: the fence passes and b takes the lease meanwhile
        b = worker(store, clock, "b")
        assert [lease.shard_id for lease in b.held()] == ["s1"]
        return call()  # then a's heartbeat lands (its own row: the condition holds)

    store.hooks["heartbeat"] = slow_heartbeat
    assert a.heartbeat_once()
    assert not a.may_process("s1"), "a processes s1 while b holds it"
    assert a.held() == []


# ------------------------------------------------------------------------------ defect 2


def test_a_take_from_a_stale_scan_rereads_the_owners_heartbeat_and_spares_a_live_owner() -> None:
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    store.stale = store.scan()  # b's scans lag behind: a's heartbeat looks as old as this copy
    for _ in range(4):  # a stays alive, renewing on time
        clock.advance(SETTINGS.renewal_interval_millis)
        assert a.heartbeat_once()
    b = worker(store, clock, "b")
    assert b.held() == [], "b took a live worker's lease on the word of a stale scan"
    assert a.may_process("s1")


def test_an_owner_is_judged_by_the_time_its_row_was_read_not_by_when_the_answer_arrived() -> None:
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    store.stale = store.scan()  # b's scans show a's first heartbeat only
    clock.advance(4_600)
    assert a.heartbeat_once()  # a's row now says t0 + 4.6 s
    clock.advance(6_000)  # b plans at t0 + 10.6 s: from its stale scan, a looks dead
    b = LeaseCoordinator(store, "b", SETTINGS, clock)
    assert b.heartbeat_once()

    def slow_answer(call: Callable[[], Any]) -> Any:
        row = call()  # read at t0 + 10.6 s: 6 s old, a is alive
        clock.advance(1_000)
        assert a.heartbeat_once()  # a renews in time (its deadline is t0 + 12.6 s)
        clock.advance(4_000)  # the answer reaches b 5 s after the read: the row is now 11 s old
        return row

    store.hooks["get_heartbeat"] = slow_answer
    b.take_round()
    assert b.held() == [], "b took a live owner's lease on an answer that arrived late"
    assert a.may_process("s1")


def test_a_take_answered_after_a_pause_is_not_used_even_if_a_heartbeat_landed_first() -> None:
    store, clock = table("s1"), FakeClock()
    a = LeaseCoordinator(store, "a", SETTINGS, clock)
    assert a.heartbeat_once()
    b = LeaseCoordinator(store, "b", SETTINGS, clock)

    def paused_after_commit(call: Callable[[], Any]) -> Any:
        taken = call()  # a's take commits; then a is frozen with the answer in flight
        clock.advance(HORIZON + 1)
        assert b.heartbeat_once()
        b.take_round()  # a looks dead: b takes s1 from it
        assert [lease.shard_id for lease in b.held()] == ["s1"]
        assert a.heartbeat_once()  # a thaws: its heartbeat thread runs first
        return taken

    store.hooks["take"] = paused_after_commit
    a.take_round()
    assert not a.may_process("s1"), "a uses a take that committed before b took the lease"


def test_a_checkpoint_answered_after_a_take_back_does_not_restore_the_earlier_ownership() -> None:
    """The worker stops with a checkpoint in flight (committed under the ownership it had), is fenced,
    and takes the lease back (the counter moves) before the old answer arrives. That answer must not
    put the earlier lease back in place of the new one: every later write would name a counter the
    table no longer has (in the fault model, seed 622, another worker had held the shard meanwhile and
    the stale lease let an old consumer carry on from its older position)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    first = a.held()[0].counter

    def paused_with_the_answer_in_flight(call: Callable[[], Any]) -> Any:
        written = call()
        clock.advance(SETTINGS.fence_after_millis + 1)
        assert a.heartbeat_once()
        a.take_round()  # takes its own lease back under a new counter
        return written

    store.hooks["checkpoint"] = paused_with_the_answer_in_flight
    a.checkpoint("s1", "100", first)
    assert [lease.counter for lease in a.held()] == [first + 1] == [store.get("s1").counter]  # type: ignore[union-attr]
    assert a.may_process("s1", first + 1)


def test_a_checkpoint_that_reaches_the_table_after_the_workers_own_take_back_is_written_under_it() -> None:
    """The worker sends a checkpoint that is slow to reach the table (a throttled, slow leases table;
    a stopped process); meanwhile it is fenced and takes its untouched lease back, which moves the
    counter, so the table refuses the write: it names the old counter. Nobody else held the shard:
    the ownership goes on, so the position is written under the new counter and the consumer carries
    on, instead of the refusal dropping the lease that was just taken back and the next consumer
    replaying the batch (slow-table chaos seeds 2, 3 and 4: 2-3 records delivered twice)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    first = a.held()[0].counter

    def reaches_the_table_after_the_take_back(call: Callable[[], Any]) -> Any:
        clock.advance(SETTINGS.fence_after_millis + 1)
        assert a.heartbeat_once()
        a.take_round()  # takes its own lease back under a new counter
        return call()  # refused: it names the counter the lease had when it was sent

    store.hooks["checkpoint"] = reaches_the_table_after_the_take_back
    a.checkpoint("s1", "100", first)
    assert store.get("s1").checkpoint == ESN("100")  # type: ignore[union-attr]
    assert [lease.counter for lease in a.held()] == [first + 1] == [store.get("s1").counter]  # type: ignore[union-attr]
    assert a.may_process("s1", first)


def test_a_checkpoint_refused_while_the_take_back_is_being_answered_is_resumed_after() -> None:
    """As above, but the consumer's checkpoint comes after the fence and before the take-back's
    answer: the position is kept, and the take-back, once answered, writes it instead of handing
    the next consumer the older checkpoint."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    first = a.held()[0].counter
    clock.advance(SETTINGS.fence_after_millis + 1)
    assert a.heartbeat_once()  # the fence dropped s1; the next round takes it back

    def answered_after_the_checkpoint(call: Callable[[], Any]) -> Any:
        taken = call()
        with pytest.raises(LeaseLostError):
            a.checkpoint("s1", "100", first)
        return taken

    store.hooks["take"] = answered_after_the_checkpoint
    a.take_round()
    (lease,) = a.held()
    assert lease.checkpoint == ESN("100") == store.get("s1").checkpoint  # type: ignore[union-attr]


def test_a_scan_older_than_a_lease_does_not_drop_it() -> None:
    """An eventually consistent scan can predate a lease that was created and taken since. The lease
    is simply not in it; that is no sign of a loss (a held lease is never cleaned up). Treating it as
    lost dropped the lease, re-adopted it as a new ownership and replayed the batch whose checkpoint
    the re-adoption refused (fault-model sweep, seed 215: a worker delivered a record twice with no
    other owner in between)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    held = a.held()[0]
    store.stale = Snapshot({}, store.scan().heartbeats)  # from before s1 was created
    a.take_round()
    assert a.held() == [held] and a.may_process("s1", held.counter)


def test_progress_from_an_earlier_ownership_is_recorded_when_the_shard_is_mine_again() -> None:
    """A consumer finishes a batch under an ownership that has since ended (fenced, another worker
    took the shard and died, this worker took it back). Its checkpoint is refused — it must stop —
    but the records are processed: the position is recorded under the current ownership, so the
    next consumer starts after them instead of delivering them again (slow-table chaos, seed 1:
    3 records twice)."""
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    first = a.held()[0].counter
    clock.advance(HORIZON + 1)
    b = worker(store, clock, "b")  # a looked dead: b takes s1, then dies without a checkpoint
    clock.advance(HORIZON + 1)
    assert a.heartbeat_once()
    a.take_round()
    assert a.may_process("s1") and not a.may_process("s1", first)
    with pytest.raises(LeaseLostError):
        a.checkpoint("s1", "100", first)
    assert store.get("s1").checkpoint == ESN("100")  # type: ignore[union-attr]
    assert a.held()[0].checkpoint == ESN("100") and b.held() == []


# ------------------------------------------------------------------------------ defect 3


@pytest.mark.parametrize("ambiguity", [retried_after_commit, timed_out_after_commit])
def test_a_heartbeat_that_committed_but_failed_recovers_and_keeps_the_leases(
    ambiguity: Callable[[Callable[[], Any]], Any],
) -> None:
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    clock.advance(SETTINGS.renewal_interval_millis)
    store.hooks["heartbeat"] = ambiguity
    first = a.heartbeat_once()
    ok = 0
    for _ in range(200):  # 11 simulated minutes of heartbeats
        clock.advance(SETTINGS.renewal_interval_millis)
        ok += a.heartbeat_once()
    assert ok == 200
    assert first or ambiguity is timed_out_after_commit
    assert a.may_process("s1")


# ------------------------------------------------------------------------------ defect 6


def test_a_fenced_worker_does_not_re_adopt_its_leases_before_its_heartbeat_succeeds() -> None:
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    counter = store.get("s1").counter  # type: ignore[union-attr]
    clock.advance(SETTINGS.fence_after_millis + 1)  # no heartbeat since: a is fenced
    a.take_round()
    assert store.get("s1").counter == counter, "a fenced worker moved a counter it cannot use"  # type: ignore[union-attr]
    assert not a.may_process("s1")
    assert a.heartbeat_once()
    a.take_round()  # alive again: it re-adopts by a take that moves the counter
    assert store.get("s1").counter == counter + 1  # type: ignore[union-attr]
    assert a.may_process("s1")


def test_a_take_is_not_sent_once_the_fence_passed_during_the_round() -> None:
    """The round began unfenced, but its reads were slow: by the time the take would go out, the
    worker is fenced. Sent anyway, it would move the counter of a lease the worker may not use, under
    a worker that may be taking it (found by the fault model's sixth promise)."""
    store, clock = table("s1"), FakeClock()
    dead = worker(store, clock, "dead")  # takes s1, then dies
    counter = store.get("s1").counter  # type: ignore[union-attr]
    clock.advance(HORIZON + 1)
    b = LeaseCoordinator(store, "b", SETTINGS, clock)
    assert b.heartbeat_once()

    def slow_read(call: Callable[[], Any]) -> Any:
        row = call()
        clock.advance(SETTINGS.fence_after_millis + 1)  # b's own heartbeats fail meanwhile
        return row

    store.hooks["get_heartbeat"] = slow_read
    b.take_round()
    assert store.get("s1").counter == counter, "a fenced worker sent a take"  # type: ignore[union-attr]
    assert b.held() == [] and dead.held() == []


# ------------------------------------------------------------------------------ defect 7


def test_a_renewal_interval_that_guarantees_self_fencing_is_refused() -> None:
    with pytest.raises(ValueError, match="no room for a retried heartbeat"):
        WorkerSettings(failover_time_millis=10_000, lease_renewal_interval_millis=9_000)
    with pytest.raises(ValueError, match="use at most 5999"):
        WorkerSettings(failover_time_millis=10_000, lease_renewal_interval_millis=6_000)
    assert WorkerSettings(failover_time_millis=10_000, lease_renewal_interval_millis=5_999)


# ------------------------------------------------------------------------------ defect 8


def test_a_shard_end_checkpoint_that_landed_and_was_retried_finishes_the_lease() -> None:
    store, clock = table("s1"), FakeClock()
    a = worker(store, clock, "a")
    events: list[LeaseEvent] = []
    a.add_listener(events.append)
    store.hooks["checkpoint"] = retried_after_commit  # the retry meets SHARD_END and fails its condition
    a.checkpoint("s1", SHARD_END)
    assert [(e.kind, e.shard_id) for e in events] == [("finished", "s1")]
    assert store.get("s1").finished  # type: ignore[union-attr]


def test_an_at_timestamp_checkpoint_from_a_kcl_table_resumes_at_trim_horizon() -> None:
    assert Position.from_checkpoint("AT_TIMESTAMP") == Position.trim_horizon()


def test_fencing_time_counts_the_time_a_suspended_host_was_asleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """CLOCK_MONOTONIC stops while a VM is suspended; a resumed worker would think its heartbeat recent."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        pytest.skip("no CLOCK_BOOTTIME on this platform (its monotonic clock counts sleep)")
    real = time.clock_gettime_ns
    monkeypatch.setattr(time, "monotonic_ns", lambda: 1_000 * 1_000_000)  # stopped during the suspend
    monkeypatch.setattr(
        time, "clock_gettime_ns", lambda which: 61_000 * 1_000_000 if which == boottime else real(which)
    )
    assert clock_module.SystemClock().monotonic_millis() == 61_000
    assert isinstance(SystemClock().wall_millis(), int)


def test_ready_shards_left_free_at_the_cap_are_reported_once_the_fleet_had_time_to_join(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fleet starting: the first worker fills its cap while the others boot. That is no shortfall
    (it cried wolf at every start, naming a setting that does not exist); one that lasts with the
    fleet settled is, and the advice is `consumer plan`'s, naming real settings."""
    store, clock = table("s1", "s2", "s3", "s4", "s5"), FakeClock()
    capped = WorkerSettings(max_leases_for_worker=2)
    metrics = RecordingMetrics()
    settings = Settings.model_validate(
        {
            "application_name": "app",
            "table": {"name": "orders", "partition_key": {"name": "pk"}, "partitions": 5},
            "worker": {"max_leases_for_worker": 2},
        }
    )
    advice = capacity_advice(settings)
    a = LeaseCoordinator(
        store, "a", capped, clock, metrics=metrics, capacity_advice=advice, expected_workers=1
    )
    with caplog.at_level(logging.WARNING, logger="consumer.leases"):
        a.heartbeat_once()
        a.take_round()
        assert len(a.held()) == 2
        assert "ready shards" not in caplog.text
        assert metrics.gauges[("TakeLeases", "ReadyLeasesUnassigned")] == 0
        for _ in range(30):  # two minutes of rounds, the fleet unchanged
            clock.advance(capped.taker_interval_millis)
            a.heartbeat_once()
            a.take_round()
    assert "3 ready shards are left unprocessed" in caplog.text
    assert "max_leases_for_worker=2" in caplog.text
    assert "fleet.max_size" not in caplog.text and "fleet.max_instances" in caplog.text
    assert "Raise worker.max_leases_for_worker to 4" in caplog.text  # 2 x ceil(5 / (2 x 2))
    assert metrics.gauges[("TakeLeases", "ReadyLeasesUnassigned")] == 3
    plan = make_plan(settings)
    assert plan.value("max_leases_for_worker_suggested") == 4

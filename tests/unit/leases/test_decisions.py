"""Pure lease decisions under generated tables, worker sets and crashes."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.leases.decisions import (
    KclExpiryTracker,
    Timing,
    dead_heartbeats,
    live_workers,
    parents_finished,
    plan_round,
    quotas,
)
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease, Snapshot

NOW = 1_700_000_000_000
TIMING = Timing(failover_millis=10_000, skew_millis=500)
WORKERS = [f"w{i}" for i in range(6)]


@st.composite
def tables(draw: st.DrawFn) -> tuple[Snapshot, str]:
    n_workers = draw(st.integers(1, 6))
    workers = WORKERS[:n_workers]
    beats = {}
    for w in workers:
        age = draw(st.sampled_from([0, 2_000, 9_000, 10_400, 11_000, 60_000]))
        beats[w] = Heartbeat(w, draw(st.integers(1, 50)), NOW - age)
    n = draw(st.integers(0, 40))
    leases = {}
    for i in range(n):
        parents = frozenset(
            {f"s{j}" for j in draw(st.sets(st.integers(0, max(0, i - 1)), max_size=2))} if i else set()
        )
        checkpoint = ExtendedSequenceNumber(
            draw(st.sampled_from(["TRIM_HORIZON", "SHARD_END", "100", "200"]))
        )
        owner = draw(st.one_of(st.none(), st.sampled_from([*workers, "java-kcl-worker"])))
        pending = draw(st.one_of(st.none(), st.sampled_from(workers))) if owner else None
        leases[f"s{i}"] = Lease(
            f"s{i}",
            owner,
            draw(st.integers(0, 9)),
            checkpoint,
            0,
            parents,
            pending_owner=pending if pending != owner else None,
        )
    me = draw(st.sampled_from(workers))
    return Snapshot(leases, beats), me


def effective_counts(snapshot: Snapshot, me: str, plan) -> Counter[str]:  # type: ignore[no-untyped-def]
    live = live_workers(snapshot, NOW, TIMING) | {me}
    counts: Counter[str] = Counter()
    for lease in snapshot.leases.values():
        if not lease.finished and lease.owner in live:
            counts[lease.owner] += 1
    return counts


@given(tables(), st.integers(1, 12), st.integers(1, 4))
@settings(max_examples=300)
def test_plan_invariants(table: tuple[Snapshot, str], cap: int, steal: int) -> None:
    snapshot, me = table
    plan = plan_round(
        me, snapshot, NOW, TIMING, max_leases_for_worker=cap, max_leases_to_steal=steal, rng=random.Random(1)
    )
    live = live_workers(snapshot, NOW, TIMING) | {me}
    taken = [lease.shard_id for lease in plan.take]
    assert len(taken) == len(set(taken))
    for lease in plan.take:
        # Only free leases, or leases whose owner is dead (or a heartbeat-less KCL owner judged expired).
        assert lease.owner is None or (lease.owner in snapshot.heartbeats and lease.owner not in live)
        assert not lease.finished
    for lease in plan.shed:
        assert lease.owner == me and not lease.finished
    for lease, to in plan.hand_over:
        assert lease.owner == me and lease.pending_owner is not None
        assert to is None or to in live
    assert len(plan.steal) <= steal
    for lease in plan.steal:
        assert lease.owner in live and lease.owner != me and lease.pending_owner is None
    assert not (set(taken) & {lease.shard_id for lease in plan.shed})
    # The ready pool after the plan never exceeds the cap.
    ready_mine = [
        lease
        for lease in snapshot.leases.values()
        if lease.owner == me and not lease.finished and parents_finished(lease, snapshot.leases)
    ]
    shed_ready = [lease for lease in plan.shed if parents_finished(lease, snapshot.leases)]
    took_ready = [lease for lease in plan.take if parents_finished(lease, snapshot.leases)]
    if len(ready_mine) <= cap:
        assert len(ready_mine) - len(shed_ready) + len(took_ready) <= cap


def test_quota_gives_the_extra_leases_to_the_most_loaded() -> None:
    assert quotas({"a": 86, "b": 85, "c": 85, "d": 0}, "abcd", 256, None) == {
        "a": 64,
        "b": 64,
        "c": 64,
        "d": 64,
    }
    assert quotas({"a": 5, "b": 1}, "abc", 7, None) == {"a": 3, "b": 2, "c": 2}
    assert quotas({"a": 5}, "ab", 7, 2) == {"a": 2, "b": 2}


def test_joining_worker_gets_its_share_by_shedding_not_snatching() -> None:
    beats = {w: Heartbeat(w, 1, NOW) for w in "abcd"}
    leases = {}
    for i in range(256):
        leases[f"s{i:03d}"] = Lease(f"s{i:03d}", "abc"[i % 3], 1, ExtendedSequenceNumber("100"))
    snapshot = Snapshot(leases, beats)
    shed = {
        w: len(plan_round(w, snapshot, NOW, TIMING, max_leases_for_worker=10**6, max_leases_to_steal=1).shed)
        for w in "abc"
    }
    assert sum(shed.values()) == 256 - 3 * 64
    newcomer = plan_round("d", snapshot, NOW, TIMING, max_leases_for_worker=10**6, max_leases_to_steal=1)
    assert not newcomer.take and len(newcomer.steal) == 1  # nothing free yet: one hand-over request


def test_dead_workers_leases_are_taken_and_expiry_needs_failover_plus_skew() -> None:
    beats = {"a": Heartbeat("a", 1, NOW - 10_400), "b": Heartbeat("b", 1, NOW - 10_600)}
    leases = {
        "s1": Lease("s1", "a", 3, ExtendedSequenceNumber("5")),
        "s2": Lease("s2", "b", 3, ExtendedSequenceNumber("5")),
    }
    plan = plan_round(
        "c",
        Snapshot(leases, {**beats, "c": Heartbeat("c", 1, NOW)}),
        NOW,
        TIMING,
        max_leases_for_worker=10,
        max_leases_to_steal=1,
    )
    assert [lease.shard_id for lease in plan.take] == ["s2"]  # a is within failover + skew, b is not
    assert plan.expired == 1


def test_blocked_children_do_not_use_the_cap_their_parents_need() -> None:
    # Seed 002's deadlock: two workers capped at 1, each holding a child whose parent nobody holds.
    beats = {w: Heartbeat(w, 1, NOW) for w in "ab"}
    leases = {
        "p1": Lease("p1", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")),
        "p2": Lease("p2", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")),
        "c1": Lease("c1", "a", 1, ExtendedSequenceNumber("TRIM_HORIZON"), parent_shard_ids=frozenset({"p1"})),
        "c2": Lease("c2", "b", 1, ExtendedSequenceNumber("TRIM_HORIZON"), parent_shard_ids=frozenset({"p2"})),
    }
    snapshot = Snapshot(leases, beats)
    taken = [
        plan_round(w, snapshot, NOW, TIMING, max_leases_for_worker=1, max_leases_to_steal=1).take
        for w in "ab"
    ]
    assert all(len(t) == 1 and t[0].shard_id in {"p1", "p2"} for t in taken)


def test_kcl_owner_without_heartbeat_expires_only_after_failover_of_observation() -> None:
    tracker = KclExpiryTracker(failover_millis=10_000)
    lease = Lease("s1", "java-worker", 7, ExtendedSequenceNumber("123"))
    snapshot = Snapshot({"s1": lease}, {})
    assert tracker.observe(snapshot, 0) == frozenset()
    assert tracker.observe(snapshot, 9_000) == frozenset()
    renewed = Snapshot({"s1": Lease("s1", "java-worker", 8, ExtendedSequenceNumber("123"))}, {})
    assert tracker.observe(renewed, 12_000) == frozenset()  # the counter moved: the clock restarts
    assert tracker.observe(renewed, 22_001) == frozenset({"s1"})


def test_heartbeat_rows_of_long_dead_workers_are_retired_unless_they_own_leases() -> None:
    beats = {"old": Heartbeat("old", 1, NOW - 200_000), "owner": Heartbeat("owner", 1, NOW - 200_000)}
    leases = {"s1": Lease("s1", "owner", 1, ExtendedSequenceNumber("1"))}
    assert dead_heartbeats(Snapshot(leases, beats), NOW, TIMING) == ("old",)


def test_pending_hand_overs_count_towards_the_thiefs_need() -> None:
    """A victim that has not yet honoured a request must not be asked again for another lease each round."""
    now = 10_000_000
    leases = {
        f"s{i}": Lease(f"s{i}", "a" if i < 3 else "b", 1, ExtendedSequenceNumber("1")) for i in range(5)
    }
    beats = {w: Heartbeat(w, 1, now) for w in ("a", "b", "c")}
    first = plan_round(
        "c", Snapshot(leases, beats), now, TIMING, max_leases_for_worker=10, max_leases_to_steal=1
    )
    assert [lease.owner for lease in first.steal] == ["a"]
    asked = first.steal[0]
    leases[asked.shard_id] = Lease(
        asked.shard_id, "a", 1, ExtendedSequenceNumber("1"), pending_owner="c", pending_since=now
    )
    again = plan_round(
        "c", Snapshot(leases, beats), now + 3333, TIMING, max_leases_for_worker=10, max_leases_to_steal=1
    )
    assert again.steal == ()  # quota 1 (5 leases, 3 workers), one hand-over already on its way


def test_an_unhonoured_hand_over_is_taken_only_after_failover_plus_skew() -> None:
    now = 10_000_000
    beats = {w: Heartbeat(w, 1, now) for w in ("a", "c")}
    asked = Lease("s0", "a", 4, ExtendedSequenceNumber("1"), pending_owner="c", pending_since=now)
    leases = {"s0": asked, "s1": Lease("s1", "a", 1, ExtendedSequenceNumber("1"))}
    horizon = TIMING.failover_millis + TIMING.skew_millis
    for elapsed, forced in ((horizon, False), (horizon + 1, True)):
        beats["a"] = Heartbeat("a", 2, now + elapsed)  # the owner is alive throughout
        plan = plan_round(
            "c",
            Snapshot(leases, beats),
            now + elapsed,
            TIMING,
            max_leases_for_worker=10,
            max_leases_to_steal=1,
        )
        assert (asked in plan.take) is forced
        assert plan.steal == ()  # the pending request counts: no second ask

"""A gracefully stopping worker hands each lease to a named survivor, which takes it up at its next
taker round: within one taking interval, instead of waiting until some worker's plan wants a free
lease (1.67 taking intervals measured before: the stopping worker's row still counted it as live)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.decisions import Timing
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease, Snapshot
from consumer.leases.successors import successor
from ground.clock import FakeClock
from ground.settings import WorkerSettings

SETTINGS = WorkerSettings()
TIMING = Timing.of(SETTINGS)


def test_each_released_lease_goes_to_the_least_loaded_survivor_who_takes_it_up_in_one_round() -> None:
    store, clock = InMemoryLeaseStore(), FakeClock()
    for i in range(6):
        store.create_if_absent(Lease(f"s{i}", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    workers = [LeaseCoordinator(store, name, SETTINGS, clock) for name in ("a", "b", "c")]
    for w in workers:
        assert w.heartbeat_once()
    for _ in range(4):
        for w in workers:
            w.take_round()
    assert sorted(len(w.held()) for w in workers) == [2, 2, 2]
    leaving, b, c = workers
    leaving.stop_taking()
    b.take_round()  # before the leaving worker's row says it is stopping: a light round, nothing to do
    assert b.latest_snapshot() is not None
    leaving.heartbeat_once()  # the row now says "stopping": the others scan every round
    leaving.release_all()
    owners = sorted(lease.owner or "" for lease in store.scan().leases.values())
    assert owners == ["b", "b", "b", "c", "c", "c"]
    b.take_round()
    c.take_round()
    assert (len(b.held()), len(c.held())) == (3, 3)
    assert all(b.may_process(lease.shard_id) for lease in b.held())


@given(
    loads=st.dictionaries(st.sampled_from("bcdefg"), st.integers(0, 6), min_size=1, max_size=6),
    dead=st.sets(st.sampled_from("bcdefg")),
    stopping=st.sets(st.sampled_from("bcdefg"), max_size=2),
    handed=st.integers(1, 12),
    cap=st.integers(1, 10),
)
def test_successors_are_live_others_below_their_cap_and_the_deal_spreads_evenly(
    loads: dict[str, int], dead: set[str], stopping: set[str], handed: int, cap: int
) -> None:
    """Every stopping worker deals all the stopping workers' leases alike: survivors only (live, not
    stopping), never beyond the cap, and a survivor is dealt a lease only while none is emptier."""
    now = 50_000_000
    beats = {
        w: Heartbeat(
            w, 1, now - (2 * SETTINGS.failover_time_millis if w in dead else 0), stopping=w in stopping
        )
        for w in loads
    }
    beats["a"] = Heartbeat("a", 1, now, stopping=True)
    leases = {
        f"{w}{i}": Lease(f"{w}{i}", w, 1, ExtendedSequenceNumber("TRIM_HORIZON"))
        for w, n in loads.items()
        for i in range(n)
    }
    mine = {
        f"a{i:02d}": Lease(f"a{i:02d}", "a", 1, ExtendedSequenceNumber("TRIM_HORIZON")) for i in range(handed)
    }
    snapshot = Snapshot({**leases, **mine}, beats)
    survivors = {w for w in loads if w not in dead and w not in stopping}
    live_stopping = {w for w in stopping if w not in dead} | {"a"}
    deal = sorted(s for s, lease in snapshot.leases.items() if lease.owner in live_stopping)
    got = dict.fromkeys(survivors, 0)
    for shard in deal:
        owner = snapshot.leases[shard].owner or "a"
        chosen = successor(owner, snapshot, now, TIMING, shard_id=shard, max_leases_for_worker=cap)
        load = {w: loads[w] + got[w] for w in survivors}
        if chosen is None:
            assert all(n >= cap for n in load.values())
            continue
        assert chosen in survivors and load[chosen] < cap
        assert load[chosen] == min(n for n in load.values() if n < cap)
        got[chosen] += 1


def test_a_worker_of_another_host_and_not_stopping_comes_first() -> None:
    """A host stops its workers together (a scale-in, a rolling deploy's terminated instance): a
    lease handed to a neighbour told to stop in the same second waited for its heartbeat to expire
    (13 s in the rolling-deploy bench)."""
    now = 50_000_000
    me, neighbour, other, stopping = (
        "worker-2@ip-10-0-0-1:41:aa",
        "worker-1@ip-10-0-0-1:40:bb",
        "worker-3@ip-10-0-0-2:42:cc",
        "worker-4@ip-10-0-0-3:43:dd",
    )
    beats = {w: Heartbeat(w, 1, now) for w in (me, neighbour, other)}
    beats[stopping] = Heartbeat(stopping, 1, now, stopping=True)
    # The neighbour holds the fewest leases, yet the worker of another host is chosen.
    leases = {f"o{i}": Lease(f"o{i}", other, 1, ExtendedSequenceNumber("TRIM_HORIZON")) for i in range(3)}
    beats[me] = Heartbeat(me, 1, now, stopping=True)
    mine = {f"m{i}": Lease(f"m{i}", me, 1, ExtendedSequenceNumber("TRIM_HORIZON")) for i in range(8)}
    snapshot = Snapshot({**leases, **mine}, beats)
    dealt = [successor(me, snapshot, now, TIMING, shard_id=s, max_leases_for_worker=10) for s in sorted(mine)]
    # A stopping worker is never chosen; the neighbour only once the other host is at its cap.
    assert dealt == [other] * 7 + [neighbour]


def _worker(n: int) -> str:
    """A worker id of the usual shape, two workers per host (an instance's two units)."""
    return f"worker-{n}@inst-{(n - 1) // 2}:{n}:t"


def test_a_whole_group_stopping_at_once_deals_its_leases_evenly_from_fresh_rows() -> None:
    """A deploy deletes the old group: every old worker stops in the same second while the new
    workers have just taken their first share. Each stopper's last full scan still shows the new
    workers empty; dealt from it, every stopper handed its leases to the same lowest ids (the
    rolling-deploy bench's worker-10 was handed 7 leases for a share of 4, adopted the last 2.5 s
    later and shed the surplus at once: 3.9 s of pause). Dealt from rows read for the stop, each new
    worker is handed exactly its share, and nothing to a worker that is stopping too."""
    store, clock = InMemoryLeaseStore(), FakeClock()
    for i in range(24):
        store.create_if_absent(Lease(f"s{i:02d}", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    old = [LeaseCoordinator(store, _worker(n), SETTINGS, clock) for n in range(1, 7)]
    new = [LeaseCoordinator(store, _worker(n), SETTINGS, clock) for n in range(7, 13)]
    for w in old:
        assert w.heartbeat_once()
    for w in old:
        w.take_round()
    assert [len(w.held()) for w in old] == [4] * 6
    for w in new:  # the new group boots: registered, nothing held yet
        assert w.heartbeat_once()
    for w in old:  # a full scan (the live workers changed): each sheds down to its share of 12 workers
        plan = w.take_round()
        assert plan is not None and len(plan.shed) == 2
        for lease in plan.shed:
            w.release(lease.shard_id)
    for w in new:  # each new worker's first round (its instance's signal): it takes its share
        w.take_round()
    assert [len(w.held()) for w in new] == [2] * 6
    for w in old:  # the old group deleted: SIGTERM to every old worker in the same second
        w.stop_taking()
    for w in old:
        assert w.heartbeat_once()
    for w in old:
        w.release_all()
    owners = Counter(lease.owner for lease in store.scan().leases.values())
    assert owners == {w.worker_id: 4 for w in new}


def test_stoppers_dealing_from_stale_rows_still_spread_their_leases() -> None:
    """The fallback when a stopper cannot read the tables again (dealing.py): every old worker of a
    deleted group deals from its own old rows, where the new workers are still empty and nobody
    else is stopping yet. Ties broken by id sent all 24 leases to the four lowest ids (6 each, two
    new workers none); broken by a hash of shard and worker, every new worker is dealt some."""
    now = 50_000_000
    old = [_worker(n) for n in range(1, 7)]
    new = [_worker(n) for n in range(7, 13)]
    leases = {
        f"s{i:02d}": Lease(f"s{i:02d}", old[i // 4], 1, ExtendedSequenceNumber("TRIM_HORIZON"))
        for i in range(24)
    }
    dealt: Counter[str | None] = Counter()
    for me in old:
        snapshot = Snapshot(leases, {w: Heartbeat(w, 1, now, stopping=w == me) for w in old + new})
        for shard in sorted(s for s, lease in leases.items() if lease.owner == me):
            dealt[successor(me, snapshot, now, TIMING, shard_id=shard, max_leases_for_worker=100)] += 1
    assert set(dealt) == set(new)
    assert max(dealt.values()) - min(dealt.values()) <= 2


def test_a_lease_handed_to_a_worker_that_was_stopping_too_is_handed_on_before_the_stop_ends() -> None:
    """Two workers of different hosts stop in the same second; the first deals before the second's
    row says "stopping" and hands it leases it will never adopt (once its row is gone they would
    wait for the KCL expiry rule, a failover time). As its last step the first reads the workers
    table again and hands them on to the survivor, conditional on the counter it left."""
    store, clock = InMemoryLeaseStore(), FakeClock()
    for i in range(6):
        store.create_if_absent(Lease(f"s{i}", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    first, second, survivor = (LeaseCoordinator(store, _worker(n), SETTINGS, clock) for n in (1, 3, 5))
    for w in (first, second, survivor):
        assert w.heartbeat_once()
    for w in (first, second, survivor):
        w.take_round()
    assert [len(w.held()) for w in (first, second, survivor)] == [2, 2, 2]
    first.stop_taking()
    second.stop_taking()
    assert first.heartbeat_once()  # the second's beat has not landed yet
    first.release_all()
    handed = {s for s, lease in store.scan().leases.items() if lease.owner == second.worker_id}
    assert handed - {lease.shard_id for lease in second.held()}  # dealt one of the first's leases
    assert second.heartbeat_once()  # now its row says "stopping"
    first.stop()
    second.stop()
    owners = Counter(lease.owner for lease in store.scan().leases.values())
    assert owners == {survivor.worker_id: 6}

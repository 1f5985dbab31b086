"""A gracefully stopping worker hands each lease to a named survivor, which takes it up at its next
taker round: within one taking interval, instead of waiting until some worker's plan wants a free
lease (1.67 taking intervals measured before: the stopping worker's row still counted it as live)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.decisions import Timing, successor
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease, Snapshot
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
    assert b.taker.latest is not None
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
    handed=st.integers(1, 12),
    cap=st.integers(1, 10),
)
def test_successors_are_live_others_below_their_cap_and_spread_evenly(
    loads: dict[str, int], dead: set[str], handed: int, cap: int
) -> None:
    now = 50_000_000
    beats = {w: Heartbeat(w, 1, now - (2 * SETTINGS.failover_time_millis if w in dead else 0)) for w in loads}
    beats["a"] = Heartbeat("a", 1, now)
    leases = {
        f"{w}{i}": Lease(f"{w}{i}", w, 1, ExtendedSequenceNumber("TRIM_HORIZON"))
        for w, n in loads.items()
        for i in range(n)
    }
    snapshot = Snapshot(leases, beats)
    given_out: dict[str, int] = {}
    for _ in range(handed):
        chosen = successor("a", snapshot, now, TIMING, given=given_out, max_leases_for_worker=cap)
        if chosen is None:
            assert all(w in dead or loads[w] + given_out.get(w, 0) >= cap for w in loads)
            break
        assert chosen != "a" and chosen not in dead
        assert loads[chosen] + given_out.get(chosen, 0) < cap
        # The least loaded among the eligible.
        eligible = {
            w: loads[w] + given_out.get(w, 0)
            for w in loads
            if w not in dead and loads[w] + given_out.get(w, 0) < cap
        }
        assert eligible[chosen] == min(eligible.values())
        given_out[chosen] = given_out.get(chosen, 0) + 1

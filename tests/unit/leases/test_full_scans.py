"""The taker reads the whole leases table only when something may need doing (issue 20): a round
otherwise reads the workers table alone. Each reason for a full scan is shown, and that what the
full scans were for still happens: a dead worker's leases taken, a new lease taken, a graceful stop's
hand-overs adopted."""

from __future__ import annotations

from bench.capacity import MeteredStore
from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.decisions import RoundPlan
from consumer.leases.machine.reading import full_scan_reason
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from ground.clock import FakeClock
from ground.settings import WorkerSettings

SETTINGS = WorkerSettings()
ME, A, B = frozenset({"me"}), frozenset({"me", "a"}), frozenset({"me", "a", "b"})


def _reason(**kwargs: object) -> str | None:
    values: dict[str, object] = {
        "since_full_millis": 1_000,
        "full_scan_interval_millis": 20_000,
        "live_now": A,
        "live_at_full": A,
        "held_active": 5,
        "held_after_plan": 5,
        "last_plan": RoundPlan(target=5, mine=5),
        "others_stopping": False,
    }
    values.update(kwargs)
    return full_scan_reason(**values)  # type: ignore[arg-type]


def test_each_reason_for_a_full_scan() -> None:
    assert _reason() is None
    assert _reason(since_full_millis=None) == "first"
    assert _reason(since_full_millis=20_000) == "interval"
    assert _reason(live_now=B) == "workers"  # joined
    assert _reason(live_now=ME) == "workers"  # died or left
    assert _reason(others_stopping=True) == "handing"
    lease = Lease("s", None, 0, ExtendedSequenceNumber("TRIM_HORIZON"))
    assert _reason(last_plan=RoundPlan(take=(lease,), target=5, mine=4)) == "wanting"
    assert _reason(last_plan=RoundPlan(target=6, mine=5, short=1)) == "wanting"
    assert _reason(last_plan=RoundPlan(target=5, mine=5, expired=2)) == "wanting"
    assert _reason(held_active=4) == "wanting"  # one finished, was handed over or lost since
    assert _reason(last_plan=RoundPlan(target=6, mine=6)) == "wanting"  # the table names me owner of one more


def _fleet(names: tuple[str, ...], leases: int) -> tuple[MeteredStore, FakeClock, list[LeaseCoordinator]]:
    store, clock = MeteredStore(InMemoryLeaseStore()), FakeClock()
    for i in range(leases):
        store.inner.create_if_absent(Lease(f"s{i:03d}", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    workers = [LeaseCoordinator(store, name, SETTINGS, clock) for name in names]
    return store, clock, workers


def _rounds(clock: FakeClock, workers: list[LeaseCoordinator], millis: int, *, skip: str = "") -> None:
    """Heartbeats and taker rounds at their intervals, for ``millis`` of simulated time."""
    step = SETTINGS.taker_interval_millis
    for _ in range(millis // step):
        for worker in workers:
            if worker.worker_id != skip:
                worker.heartbeat_once()
                worker.take_round()
        clock.advance(step)


def test_a_settled_fleet_reads_the_leases_table_once_per_full_scan_interval() -> None:
    store, clock, workers = _fleet(("a", "b", "c"), 30)
    _rounds(clock, workers, 3 * SETTINGS.full_scan_interval_millis)
    assert sorted(len(w.held()) for w in workers) == [10, 10, 10]
    scans, light = store.meter.scans, store.meter.worker_scans
    _rounds(clock, workers, 4 * SETTINGS.full_scan_interval_millis)
    rounds = 3 * 4 * SETTINGS.full_scan_interval_millis // SETTINGS.taker_interval_millis
    full = store.meter.scans - scans
    assert full <= 3 * 5  # one per worker per interval (4 intervals; phase can add one)
    assert store.meter.worker_scans - light >= rounds - full - 3
    assert sorted(len(w.held()) for w in workers) == [10, 10, 10]


def test_a_dead_workers_leases_are_taken_within_failover_and_a_round() -> None:
    _store, clock, workers = _fleet(("a", "b", "c"), 30)
    _rounds(clock, workers, 3 * SETTINGS.full_scan_interval_millis)
    died = clock.monotonic_millis()
    deadline = (
        SETTINGS.failover_time_millis + SETTINGS.max_clock_skew_millis + 2 * SETTINGS.taker_interval_millis
    )
    while sum(len(w.held()) for w in workers[1:]) < 30:
        _rounds(clock, workers, SETTINGS.taker_interval_millis, skip="a")
        assert clock.monotonic_millis() - died <= deadline, "the dead worker's leases were not taken in time"


def test_a_new_unowned_lease_is_taken_within_the_full_scan_interval() -> None:
    store, clock, workers = _fleet(("a", "b"), 10)
    _rounds(clock, workers, 3 * SETTINGS.full_scan_interval_millis)
    store.create_if_absent(Lease("child", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    created = clock.monotonic_millis()
    while not any(lease.shard_id == "child" for w in workers for lease in w.held()):
        _rounds(clock, workers, SETTINGS.taker_interval_millis)
        assert (
            clock.monotonic_millis() - created
            <= SETTINGS.full_scan_interval_millis + SETTINGS.taker_interval_millis
        )


def test_a_stopping_worker_makes_the_others_scan_every_quarter_round_and_adopt_what_it_hands_over() -> None:
    store, clock, workers = _fleet(("a", "b", "c"), 6)
    _rounds(clock, workers, 3 * SETTINGS.full_scan_interval_millis)
    leaving, b, c = workers
    assert b.taker_wait_millis() == SETTINGS.taker_interval_millis // 2
    leaving.stop_taking()
    leaving.heartbeat_once()  # what stop_taking's immediate beat does in a running worker
    b.take_round()
    c.take_round()
    assert b.taker_wait_millis() == SETTINGS.taker_interval_millis // 4
    leaving.release_all()
    scans = store.meter.scans
    b.take_round()
    c.take_round()
    assert store.meter.scans - scans == 2
    assert (len(b.held()), len(c.held())) == (3, 3)

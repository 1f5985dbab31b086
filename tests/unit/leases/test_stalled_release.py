"""A shard given up as stalled leaves this worker even when its release does not land at once
(issue 46's fleet model, hung-read seed 12: the release was refused, the next round adopted the
lease back as "mine but not held", and the shard stalled on the same worker again a stall timeout
later)."""

from __future__ import annotations

from typing import Any

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.errors import LeaseStoreThrottledError
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from ground.clock import FakeClock
from ground.settings import WorkerSettings

SETTINGS = WorkerSettings(failover_time_millis=3_000, stall_timeout_millis=20_000)
HALF = SETTINGS.taker_interval_millis // 2


class RefusesReleases(InMemoryLeaseStore):
    """The table, throttling the next ``refuse`` releases."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = 0

    def release(self, held: Lease, to: str | None = None) -> Lease:
        if self.refuse:
            self.refuse -= 1
            raise LeaseStoreThrottledError("release", "throttled")
        return super().release(held, to)


def _rounds(clock: FakeClock, workers: list[LeaseCoordinator], count: int) -> None:
    for _ in range(count):
        for worker in workers:
            worker.heartbeat_once()
            worker.take_round()
        clock.advance(HALF)


def test_a_stalled_lease_whose_release_was_refused_goes_to_another_worker_not_back() -> None:
    store, clock = RefusesReleases(), FakeClock()
    for shard in ("s0", "s1"):
        store.create_if_absent(Lease(shard, None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    a = LeaseCoordinator(store, "a", SETTINGS, clock)
    _rounds(clock, [a], 4)
    b = LeaseCoordinator(store, "b", SETTINGS, clock)
    _rounds(clock, [a, b], 2)
    stalled = next(lease.shard_id for lease in a.held())
    counter: Any = next(lease.counter for lease in a.held() if lease.shard_id == stalled)
    store.refuse = 1
    a.give_up_stalled(stalled, counter)
    assert store.get(stalled).owner == "a"  # the release was refused: the table still names a
    _rounds(clock, [a, b], 4)  # two taking intervals
    assert stalled not in {lease.shard_id for lease in a.held()}
    assert store.get(stalled).owner == "b"

"""ShardSyncer against the in-memory lease store: the first start at LATEST is planned by exactly one
worker, so two workers starting together across a rollover cannot lease the new child at LATEST."""

from __future__ import annotations

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import Snapshot
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.streams.source import Shard
from ground.clock import FakeClock
from ground.settings import WorkerSettings

LATEST_START = WorkerSettings(initial_position="LATEST")


class StaleFirstScan:
    """A store whose first scan is the empty table another worker saw before the winner wrote."""

    def __init__(self, inner: InMemoryLeaseStore) -> None:
        self.inner = inner
        self.stale = True

    def scan(self) -> Snapshot:
        if self.stale:
            self.stale = False
            return Snapshot({}, {})
        return self.inner.scan()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def syncer(
    store: object, shards: list[Shard], worker: str, settings: WorkerSettings = LATEST_START
) -> ShardSyncer:
    coordinator = LeaseCoordinator(store, worker, settings, FakeClock())  # type: ignore[arg-type]
    return ShardSyncer(
        list_shards=lambda: shards, coordinator=coordinator, settings=settings, clock=FakeClock()
    )


def checkpoints(store: InMemoryLeaseStore) -> dict[str, str]:
    return {shard: lease.checkpoint.sequence for shard, lease in store.scan().leases.items()}


def test_two_first_starts_across_a_rollover_never_lease_the_child_at_latest() -> None:
    store = InMemoryLeaseStore()
    shards = [Shard("P")]
    syncer(store, shards, "a").sync()  # a wins the first start: P at LATEST
    assert checkpoints(store) == {"P": "LATEST"}
    shards[:] = [Shard("P", ending_sequence_number="9"), Shard("C", parent_shard_id="P")]  # P rolls over
    b = syncer(StaleFirstScan(store), shards, "b")
    assert b.sync() is None  # b's scan was empty too, but the claim is a's: b plans nothing
    assert checkpoints(store) == {"P": "LATEST"}
    b.sync()  # next round, from the real table: the child is a descendant, so TRIM_HORIZON
    assert checkpoints(store) == {"P": "LATEST", "C": "TRIM_HORIZON"}


def test_a_winner_that_died_before_creating_leases_costs_a_replay_not_a_loss() -> None:
    store = InMemoryLeaseStore()
    assert store.claim_first_start("dead", 0)
    syncer(store, [Shard("P")], "b").sync()
    assert checkpoints(store) == {"P": "TRIM_HORIZON"}


def test_trim_horizon_applications_write_no_marker() -> None:
    store = InMemoryLeaseStore()
    syncer(store, [Shard("P")], "a", WorkerSettings(initial_position="TRIM_HORIZON")).sync()
    assert checkpoints(store) == {"P": "TRIM_HORIZON"} and store.first_start_by is None

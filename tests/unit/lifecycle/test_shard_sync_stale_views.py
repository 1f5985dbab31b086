"""Shard sync when its views are not fresh (issue: "Lease core under a real DynamoDB", defect 5): a
worker paused between reading the leases and listing the shards, a listing that lags the leases
table, a create sent long after it was planned. None of them may lease a finished shard again."""

from __future__ import annotations

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease, Snapshot
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.streams.source import Shard
from ground.clock import FakeClock
from ground.settings import WorkerSettings

SETTINGS = WorkerSettings(initial_position="TRIM_HORIZON")
ESN = ExtendedSequenceNumber
PARENT, CHILD = "shardId-1", "shardId-2"
CLOSED_PARENT = Shard(PARENT, ending_sequence_number="90")


def finished_parent_and_progressed_child(store: InMemoryLeaseStore) -> None:
    store.create_if_absent(Lease(CHILD, None, 0, ESN("120"), parent_shard_ids=frozenset({PARENT})))


def syncer(store: object, list_shards: object, clock: FakeClock) -> ShardSyncer:
    coordinator = LeaseCoordinator(store, "me", SETTINGS, clock)  # type: ignore[arg-type]
    return ShardSyncer(list_shards=list_shards, coordinator=coordinator, settings=SETTINGS, clock=clock)  # type: ignore[arg-type]


def test_leases_are_read_before_the_shards_are_listed() -> None:
    """Paused between the two reads, a worker must hold an older lease view and a newer listing —
    never a fresh table whose finished parent is cleaned up beside a listing without its child."""
    store, clock = InMemoryLeaseStore(), FakeClock()
    store.create_if_absent(Lease(PARENT, None, 0, ESN("SHARD_END")))  # the parent, finished
    calls: list[str] = []

    class Watched:
        def scan(self) -> Snapshot:
            calls.append("scan")
            return store.scan()

        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

    def list_shards() -> list[Shard]:
        calls.append("list")
        # The listing is from before the pause: the parent, no descendants yet. While the worker
        # was paused, two generations finished: the parent's and the child's leases are cleaned up
        # and only the grandchild's (which names the child, not the parent) is left.
        store.delete_finished(store.get(PARENT))  # type: ignore[arg-type]
        store.create_if_absent(Lease("shardId-3", None, 0, ESN("300"), parent_shard_ids=frozenset({CHILD})))
        return [CLOSED_PARENT]

    syncer(Watched(), list_shards, clock).sync()
    assert calls[:2] == ["scan", "list"]
    assert store.get(PARENT) is None or store.get(PARENT).finished  # type: ignore[union-attr]


def test_a_listing_that_lags_the_table_still_sees_the_child_through_its_lease() -> None:
    store, clock = InMemoryLeaseStore(), FakeClock()
    finished_parent_and_progressed_child(store)  # the parent's lease is already cleaned up
    syncer(store, lambda: [CLOSED_PARENT], clock).sync()  # DescribeStream has not caught up
    assert store.get(PARENT) is None, "a finished parent was leased again at TRIM_HORIZON"


def test_a_create_sent_after_any_pause_never_re_creates_a_cleaned_up_shard() -> None:
    """The worker stops just before its create goes out (GC, SIGSTOP, a suspended VM: no check made
    before sending can see it). Meanwhile the shard was leased, finished, its child progressed and its
    lease was cleaned up. The create must not land: it would replay the shard after its child.
    Found by the fault model (a stop before a call; simulation/faults.py)."""
    store, clock = InMemoryLeaseStore(), FakeClock()
    shards = [CLOSED_PARENT, Shard(CHILD, parent_shard_id=PARENT)]

    class StoppedBeforeTheCreate:
        stopped = False

        def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
            if not self.stopped:
                self.stopped = True
                clock.advance(3_600_000)  # an hour, longer than any timer of the protocol
                store.create_if_absent(Lease(PARENT, "other", 1, ESN("SHARD_END")))
                finished_parent_and_progressed_child(store)
                store.delete_finished(store.get(PARENT))  # type: ignore[arg-type]
            return store.create_if_absent(lease, generation)

        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

    syncer(StoppedBeforeTheCreate(), lambda: shards, clock).sync()
    assert store.get(PARENT) is None, "a finished, cleaned-up shard was leased again at TRIM_HORIZON"
    syncer(store, lambda: shards, clock).sync()  # the next sync plans from a fresh view
    assert store.get(PARENT) is None and store.get(CHILD) is not None


def test_a_finished_lease_is_cleaned_up_only_after_it_was_seen_finished_for_a_while() -> None:
    store, clock = InMemoryLeaseStore(), FakeClock()
    store.create_if_absent(Lease(PARENT, None, 0, ESN("SHARD_END")))
    finished_parent_and_progressed_child(store)
    shards = [CLOSED_PARENT, Shard(CHILD, parent_shard_id=PARENT)]
    sync = syncer(store, lambda: shards, clock)
    sync.sync()
    assert store.get(PARENT) is not None  # seen finished just now: a late create could still be in flight
    clock.advance(SETTINGS.cleanup_delay_millis)
    sync.sync()
    assert store.get(PARENT) is None

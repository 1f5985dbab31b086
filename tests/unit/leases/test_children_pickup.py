"""Children of an ended shard are taken within a taking interval of their creation, not at the next
full scan (issue 46: at failover 3 s they started 6.6-7.6 s after their parent ended, because only
another round's full scan -- every 2 x failover -- showed them).

The parent's owner creates the children (shard sync at the shard's end): its next round scans for
them at once and takes what its share allows; what it leaves free, its heartbeat row announces
(``Heartbeat.new_leases_at``), and every other worker's next light round sees it and scans."""

from __future__ import annotations

from collections.abc import Callable

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.decisions import RoundPlan, Timing
from consumer.leases.machine.actions import Done, Now, Outbox, Reply, Scan, ScanWorkers, advance
from consumer.leases.machine.reading import RoundReader
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease, Snapshot
from ground.clock import FakeClock
from ground.positions import SHARD_END, TRIM_HORIZON
from ground.settings import WorkerSettings

SETTINGS = WorkerSettings(failover_time_millis=3_000)
HALF = SETTINGS.taker_interval_millis // 2


def _settled(
    names: tuple[str, ...], shards: int, **settings: int
) -> tuple[FakeClock, list[LeaseCoordinator]]:
    store, clock = InMemoryLeaseStore(), FakeClock()
    for i in range(shards):
        store.create_if_absent(Lease(f"p{i}", None, 0, ExtendedSequenceNumber(TRIM_HORIZON)))
    config = SETTINGS.model_copy(update=settings)
    workers = [LeaseCoordinator(store, name, config, clock) for name in names]
    for _ in range(3 * SETTINGS.full_scan_interval_millis // HALF):
        _round(clock, workers)
    held = sorted(len(w.held()) for w in workers)
    assert sum(held) == shards and held[-1] - held[0] <= 1, held
    return clock, workers


def _round(clock: FakeClock, workers: list[LeaseCoordinator]) -> None:
    for worker in workers:
        worker.heartbeat_once()
        worker.take_round()
    clock.advance(HALF)


def _child(parent: str, name: str) -> Lease:
    return Lease(name, None, 0, ExtendedSequenceNumber(TRIM_HORIZON), parent_shard_ids=frozenset({parent}))


def _end(owner: LeaseCoordinator, parent: str, *children: str) -> None:
    """The owner checkpoints the parent's end and (shard sync) creates its children's leases."""
    owner.checkpoint(parent, SHARD_END)
    owner.take_round()  # the round that follows a lease's end (it held one fewer)
    owner.create_leases([_child(parent, child) for child in children])


def _holders(workers: list[LeaseCoordinator], shard_id: str) -> list[str]:
    return [w.worker_id for w in workers if any(lease.shard_id == shard_id for lease in w.held())]


def test_the_parents_owner_takes_its_rollover_child_at_its_next_round() -> None:
    clock, workers = _settled(("a", "b"), 2)
    owner = workers[0]
    parent = owner.held()[0].shard_id
    _end(owner, parent, "c0")
    clock.advance(HALF)
    owner.take_round()
    assert _holders(workers, "c0") == [owner.worker_id]


def test_a_child_the_owner_has_no_room_for_is_taken_by_another_worker_within_a_taking_interval() -> None:
    # A split: two children of one parent, and an owner allowed one lease only.
    clock, workers = _settled(("a", "b", "c"), 2, max_leases_for_worker=1)
    for _ in range(2):  # a taking interval after the workers' last full scans: the next is far off
        _round(clock, workers)
    owner = next(w for w in workers if w.held())
    parent = owner.held()[0].shard_id
    _end(owner, parent, "c0", "c1")
    for _ in range(SETTINGS.taker_interval_millis // HALF):
        _round(clock, workers)
    assert len(_holders(workers, "c0")) == 1 and len(_holders(workers, "c1")) == 1


def test_a_worker_that_leaves_nothing_free_announces_nothing() -> None:
    """A rollover whose child its parent's owner takes costs the others no full scan: at scale that
    is most rollovers, and a full scan of 10 000 leases is hundreds of read units."""
    clock, workers = _settled(("a", "b"), 2)
    owner = workers[0]
    parent = owner.held()[0].shard_id
    _end(owner, parent, "c0")
    clock.advance(HALF)
    owner.take_round()
    owner.heartbeat_once()
    assert owner.machine.state.row.new_leases_at == 0


def test_a_split_the_owner_has_room_for_only_in_part_is_announced_at_its_creation() -> None:
    """Shard sync creates a split's children one at a time; the owner, at its cap of two, takes one.
    The others hear of them at the creation, not after the owner's next round: their next rounds,
    within a taking interval of the creation, scan for them (the deployed fleet's model, seed
    1 000 045: a child taken 1.7 taking intervals after its parent's end, the announcement having
    waited for the owner's round)."""
    _, workers = _settled(("a", "b"), 4, max_leases_for_worker=2)
    owner = workers[0]
    parent = owner.held()[0].shard_id
    owner.checkpoint(parent, SHARD_END)
    owner.take_round()
    owner.create_leases([_child(parent, "c0")])
    assert owner.machine.state.row.new_leases_at == 0  # one child: its share has room
    owner.create_leases([_child(parent, "c1")])
    assert owner.machine.state.row.new_leases_at != 0  # the second: no room for both, said at once


class _LeasesThenRows(InMemoryLeaseStore):
    """A full scan as DynamoDB's store makes it: the leases table read first, the workers table
    after; ``between`` runs in the gap (another worker's create and announcement landing there)."""

    between: list[Callable[[], None]]

    def scan(self) -> Snapshot:
        leases = super().scan().leases
        while self.between:
            self.between.pop(0)()
        full = super().scan()
        return Snapshot(dict(leases), full.heartbeats, (), full.first_start_claimed)


def test_an_announcement_read_after_the_leases_were_scanned_is_answered_at_the_next_round() -> None:
    """The deployed fleet's model, seed 1 001 220 (43 shards, 4 workers at failover 3 s): the one
    worker with room scanned the leases just before a child was created, and its creator's row
    announcing it just after; it counted that announcement as answered by the scan that missed the
    child, which then waited 5.1 s for the next full-scan interval."""
    store, clock = _LeasesThenRows(), FakeClock()
    store.between = []
    for i in range(5):
        store.create_if_absent(Lease(f"p{i}", None, 0, ExtendedSequenceNumber(TRIM_HORIZON)))
    workers = [LeaseCoordinator(store, name, SETTINGS, clock) for name in ("a", "b", "c")]
    for _ in range(3 * SETTINGS.full_scan_interval_millis // HALF):
        _round(clock, workers)
    by_load = sorted(workers, key=lambda w: (len(w.held()), w.worker_id))
    short, creator = by_load[0], by_load[-1]
    assert (len(short.held()), len(creator.held())) == (1, 2)
    parent = creator.held()[0].shard_id
    creator.checkpoint(parent, SHARD_END)
    creator.take_round()
    # The short worker's full-scan interval comes round (it only beats meanwhile, the others go on);
    # its scan reads the leases, then a split's two children are created and announced, then it
    # reads the rows.
    for _ in range(SETTINGS.full_scan_interval_millis // HALF):
        for worker in workers:
            worker.heartbeat_once()
            if worker is not short:
                worker.take_round()
        clock.advance(HALF)

    def split() -> None:
        creator.create_leases([_child(parent, "c0"), _child(parent, "c1")])
        creator.heartbeat_once()

    store.between.append(split)
    short.take_round()
    assert store.between == []  # the round was a full scan, and the split landed inside it
    assert creator.machine.state.row.new_leases_at != 0  # announced: its share has room for one of the two
    assert _holders(workers, "c0") + _holders(workers, "c1") == []  # created after the leases were read
    for _ in range(SETTINGS.taker_interval_millis // HALF):
        _round(clock, workers)
    assert sorted(_holders(workers, "c0") + _holders(workers, "c1")) == sorted(
        [creator.worker_id, short.worker_id]
    )


def test_announcements_are_compared_with_the_same_workers_earlier_ones_not_across_clocks() -> None:
    """The deployed fleet's model, seed 1 001 370 (51 shards, 4 workers whose clocks disagree by up
    to a few hundred ms): a worker whose clock ran ahead announced leases left free; 0.2 s later one
    whose clock ran behind announced a child, stamped earlier than the first. The one worker with
    room had answered the first and took the second for old (a single newest stamp across all rows),
    so the child waited for a worker freed by its own shard's end, 1.03 taking intervals after its
    creation."""
    store, clock = InMemoryLeaseStore(), FakeClock()

    def now() -> Now:
        return Now(clock.monotonic_millis(), clock.wall_millis())

    reader = RoundReader("me", SETTINGS, Timing.of(SETTINGS), now, Outbox())
    beats = {"ahead": 0, "behind": 0}

    def beat(worker: str, announced: int = 0) -> None:
        row = store.get_heartbeat(worker)
        store.heartbeat(
            Heartbeat(worker, (row.counter + 1) if row else 1, clock.wall_millis(), new_leases_at=announced),
            row.counter if row else None,
        )

    def full_scan() -> bool:
        for worker, announced in beats.items():
            beat(worker, announced)
        clock.advance(HALF // 2)
        reading = reader.read(Snapshot({}, {}, (), False), 0, RoundPlan())
        step = advance(reading, None)
        while not isinstance(step, Done):  # the reader's requests, answered from the store
            assert isinstance(step, ScanWorkers | Scan), step
            step = advance(
                reading, Reply(store.scan_workers() if isinstance(step, ScanWorkers) else store.scan())
            )
        return step.value[1]

    assert full_scan()  # the first
    assert not full_scan()
    beats["ahead"] = clock.wall_millis() + 300  # its clock runs 300 ms ahead
    assert full_scan()
    assert not full_scan()
    beats["behind"] = clock.wall_millis() - 300  # later, by a clock 300 ms behind: an older stamp
    assert full_scan()
    assert not full_scan()

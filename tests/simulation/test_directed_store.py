"""Directed histories of the product's DynamoDB lease store under the simulator's DynamoDB API: what
a port-level model of the table could not show, because it never ran the store's requests.

Each history is calm apart from what it is about; the checker judges the usual promises.
"""

from __future__ import annotations

import logging

import pytest

from consumer.leases.table_requests import TableRequests
from simulation.checker import check
from simulation.directed import Directed
from simulation.faults import Faults
from simulation.stream import ShardSpec
from simulation.world import World
from tests.simulation.test_directed import FAILOVER, START, chain, settings
from tests.simulation.test_directed_delivery import wait_for


@pytest.fixture(autouse=True)
def _quiet() -> object:
    logging.disable(logging.WARNING)
    yield None
    logging.disable(logging.NOTSET)


def test_a_lease_created_in_a_transaction_is_counted_without_killing_shard_sync() -> None:
    """Shard sync creates a child's lease in a transaction (the lease put and the lineage check).
    DynamoDB answers TransactWriteItems' consumed capacity as a list, one entry per table, where
    every other operation answers one map; the store read it as a map, raised AttributeError after
    the lease was created, and the shard-sync thread died: no child's lease was created after that,
    so the chain stopped at the first rollover. Fix: the store counts a list of capacities
    (transaction_capacity_list)."""
    shards = chain((0, 10_000, 5), (10_000, 20_000, 5), (20_000, 90_000, 20))
    world = World(21, settings(), Faults(), shards=shards)
    finished = world.run(workers=2, chaos_millis=60_000, settle_millis=60_000, chaos=False)
    verdict = check(world, finished)
    assert verdict.ok, verdict
    assert {shard for _, shard in world.table.history.created} == set(shards)


def test_a_transactions_list_of_capacities_is_added_up() -> None:
    tables = TableRequests(None, "leases")
    capacities = [
        {"TableName": "leases", "CapacityUnits": 2.0},
        {"TableName": "leases-workers", "CapacityUnits": 2.0},
    ]
    tables.count({"ConsumedCapacity": capacities})
    assert (tables.consumed.write_units, tables.consumed.read_units, tables.consumed.requests) == (
        4.0,
        0.0,
        1,
    )


def test_a_live_owner_is_read_again_before_a_hand_over_it_was_asked_for_is_forced() -> None:
    """w1 holds four shards; w2 joins and asks w1 for its share (the lease marked pendingOwner=w2).
    w1 is slow to let go (its heartbeat's and its taker's answers are late), and w2's next scans read the leases table
    as it is and the workers table as it was a failover ago (each Scan request is answered by a
    replica of its own): the pending mark is there, and w1's row looks expired. The hand-over is not overdue; w1 is alive and still processing. Taken then,
    the shard had two owners at once. Defence: an owner judged dead is read again consistently
    unless the hand-over asked of it is really overdue (forced_take_only_overdue)."""
    shards = {
        f"shardId-{i:04d}": ShardSpec(f"shardId-{i:04d}", None, START, START + 150_000, 600) for i in range(4)
    }
    world = World(22, settings(), Faults(), shards=shards)
    stale: list[Directed] = []

    def director(w: World) -> None:
        first = w.workers["w1"]
        # Late enough that a view a failover old has w1's row in it.
        wait_for(
            w.kernel,
            lambda: first.coordinator.holdings.count() == 4 and w.kernel.now > START + 30_000,
            step=100,
        )
        w.join()
        wait_for(
            w.kernel, lambda: any((lease := w.table.get(s)) and lease.pending_owner for s in w.shards), step=1
        )
        at = w.kernel.now - START
        stale.extend(
            Directed("w2", call, at + step, thread="taker", view_age_millis=FAILOVER, table="workers")
            for step in range(0, 8_000, 500)
            for call in ("scan", "scan_workers")  # a full round, or a light one (the workers table only)
        )
        # w1 is slow to let go: the heartbeat that brings the request, and its taker's next round
        # (which would shed the lease to w2), are answered 6 s late.
        slow = [
            Directed("w1", call, at, answer_delay_millis=6_000)
            for call in ("heartbeat", "scan", "scan_workers")
        ]
        w.script.faults.extend((*slow, *stale))

    finished = world.run(
        workers=1, chaos_millis=150_000, settle_millis=120_000, chaos=False, director=director
    )
    assert stale, "w2 never asked for a lease"
    assert [f for f in stale if f.fired_at is not None], "w2 never scanned after asking"
    verdict = check(world, finished)
    assert verdict.ok, verdict

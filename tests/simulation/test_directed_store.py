"""Directed histories of the product's DynamoDB lease store under the simulator's DynamoDB API: what
a port-level model of the table could not show, because it never ran the store's requests.

Each history is calm apart from what it is about; the checker judges the usual promises.
"""

from __future__ import annotations

import logging

import pytest

from consumer.leases.table_requests import TableRequests
from simulation.checker import check
from simulation.faults import Faults
from simulation.world import World
from tests.simulation.test_directed import chain, settings


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

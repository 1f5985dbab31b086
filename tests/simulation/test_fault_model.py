"""The lease protocol under the fault model, in its short form: a few hundred seeded histories.

Each history runs the product's LeaseCoordinator and ShardSyncer for several workers on simulated
threads (tests/simulation/kernel.py) over a leases table that is slow with a long tail, stale on
scans, throttling and answering writes that committed with a 500 or a timeout, while workers are
paused past the failover time, killed and added (tests/simulation/faults.py, world.py). The checker
(tests/simulation/checker.py) then judges the history: one owner per shard at any moment, checkpoints
never moving back, no finished shard leased again, every record delivered parents-first, and every
shard finished within five minutes of the faults stopping. ``make bench`` runs the long form
(bench/lease_faults.py). ``SIM_HISTORIES`` changes how many run here.
"""

from __future__ import annotations

import logging
import os

import pytest

from tests.simulation.checker import history

HISTORIES = int(os.environ.get("SIM_HISTORIES", "200"))
BLOCKS = 8


@pytest.fixture(autouse=True)
def _quiet() -> object:
    """Thousands of expected warnings (throttles, lost races) would drown the report."""
    logging.disable(logging.WARNING)
    yield None
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("block", range(BLOCKS))
def test_every_history_keeps_one_owner_per_shard_and_loses_nothing(block: int) -> None:
    seeds = range(block, HISTORIES, BLOCKS)
    failures = {}
    for seed in seeds:
        _, verdict = history(seed)
        if not verdict.ok:
            failures[seed] = str(verdict)
    assert not failures, f"{len(failures)} of {len(seeds)} histories broke a promise: {failures}"

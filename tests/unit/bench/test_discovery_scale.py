"""The discovery scale simulation (bench/discovery_scale.py) in a short form: 500 open shards and 10
workers for 10 simulated minutes, and a restart of 30 workers together; the bench runs 10 000 and
40 000 shards with 100 workers."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from bench import discovery_scale


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """Expected warnings (children not listed yet) by the hundred; restored for the next tests."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def test_a_small_fleet_stays_within_the_budget_and_leases_every_child_in_time() -> None:
    outcome = discovery_scale.simulate(3, open_shards=500, window_millis=10 * 60_000, workers=10)
    assert outcome.children > 0
    assert outcome.within_bound == 1.0, outcome
    assert outcome.calls_per_second <= 5, outcome
    assert outcome.busiest_second <= 5, outcome


def test_a_fleet_restarting_together_keeps_to_the_budget_in_every_second() -> None:
    outcome = discovery_scale.simulate(4, open_shards=2_000, window_millis=60_000, restart=True, workers=30)
    assert outcome.calls, "the restart made no DescribeStream call at all"
    assert outcome.busiest_second <= 5, outcome

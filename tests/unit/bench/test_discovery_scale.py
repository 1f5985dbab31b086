"""The discovery scale simulation (bench/discovery_scale.py) in a short form: 500 open shards and 10
workers for 10 simulated minutes; the bench runs 10 000 and 100."""

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


def test_a_small_fleet_stays_within_the_budget_and_leases_every_child_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(discovery_scale, "OPEN_SHARDS", 500)
    monkeypatch.setattr(discovery_scale, "WORKERS", 10)
    monkeypatch.setattr(discovery_scale, "WINDOW_MILLIS", 10 * 60_000)
    outcome = discovery_scale.simulate(3)
    assert outcome.children > 0
    assert outcome.within_bound == 1.0, outcome
    assert outcome.calls_per_second <= 5, outcome

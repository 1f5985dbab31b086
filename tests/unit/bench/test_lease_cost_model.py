"""The steady-state formulas bench/lease_cost.py compares with: KCL's and this design's."""

from __future__ import annotations

from bench.lease_cost_model import compare, design_units_per_second, kcl_units_per_second
from consumer.leases.cost import scan_units
from consumer.settings import WorkerSettings


def test_kcl_formula() -> None:
    units = kcl_units_per_second(leases=300, workers=4, lease_bytes=250, failover_millis=10_000)
    assert units.writes_per_second == 300 / (10 / 3)  # every lease renewed every failover/3
    # a full scan per worker every 2 x failover
    assert units.reads_per_second == 4 * scan_units(300 * 250) / 20


def test_design_formula() -> None:
    settings = WorkerSettings()  # failover 10 s: renewal 3.308 s, taker 3.333 s
    units = design_units_per_second(300, 4, lease_bytes=250, heartbeat_bytes=100, settings=settings)
    assert units.writes_per_second == 4 * 1 / 3.308  # one 1-unit heartbeat per worker per renewal
    # one scan of each table per worker per taker round
    assert units.reads_per_second == 4 * (scan_units(300 * 250) + scan_units(4 * 100)) / 3.333


def test_comparison_writes_fall_with_leases_per_worker_and_reads_are_six_times() -> None:
    settings = WorkerSettings()
    big = compare(1024, 4, settings)
    assert big.write_ratio < 4 / 1024 * 1.01  # one write per worker instead of one per lease
    assert 5.5 < big.read_ratio < 6.5  # failover/3 scans instead of 2 x failover
    assert big.cost_ratio < 0.2
    even = compare(16, 16, settings)  # one lease per worker: no write saving, scans dominate
    assert even.cost_ratio > 1

"""The steady-state formulas bench/lease_cost.py compares with: KCL's and this design's."""

from __future__ import annotations

from bench.capacity import scan_units
from bench.lease_cost_model import compare, design_units_per_second, kcl_units_per_second
from ground.settings import WorkerSettings


def test_kcl_formula() -> None:
    units = kcl_units_per_second(leases=300, workers=4, lease_bytes=250, failover_millis=10_000)
    assert units.writes_per_second == 300 / (10 / 3)  # every lease renewed every failover/3
    # a full scan per worker every 2 x failover
    assert units.reads_per_second == 4 * scan_units(300 * 250) / 20


def test_design_formula() -> None:
    settings = WorkerSettings()  # failover 10 s: renewal 3.308 s, taker 3.333 s
    units = design_units_per_second(300, 4, lease_bytes=250, heartbeat_bytes=100, settings=settings)
    assert units.writes_per_second == 4 * 1 / 3.308  # one 1-unit heartbeat per worker per renewal
    # the workers table every round (half the taking interval), both tables every full-scan interval
    workers_table = scan_units(4 * 100)
    full = scan_units(300 * 250) + workers_table
    assert abs(units.reads_per_second - 4 * (workers_table / (3.333 / 2) + full / 20)) < 1e-9


def test_comparison_writes_fall_with_leases_per_worker_and_reads_are_about_kcls() -> None:
    settings = WorkerSettings()
    big = compare(10_000, 100, settings)
    assert big.write_ratio < 100 / 10_000 * 1.01  # one write per worker instead of one per lease
    assert 1.0 <= big.read_ratio < 1.2  # full scans as often as KCL's, plus the small workers table
    assert big.cost_ratio < 0.2
    even = compare(16, 16, settings)  # one lease per worker: no write saving, the workers table dominates
    assert even.cost_ratio > 0.5

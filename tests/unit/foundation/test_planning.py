"""`consumer plan` against figures worked out by hand (the arithmetic is in each comment)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ground.settings import load_settings
from tools.cli import main
from tools.planning import make_plan

BASE = """
application_name: plan-test
table:
  name: orders
  partition_key: {name: pk}
"""

SMALL = """
table:
  billing_mode: PROVISIONED
  read_capacity: 100
  write_capacity: 50
  storage_gb: 2
"""

# More than 50 partitions and more than 100 writes/s per partition (where the KCL defaults need tuning).
LARGE = """
table:
  billing_mode: PROVISIONED
  read_capacity: 30000
  write_capacity: 60000
  storage_gb: 200
  peak_writes_per_second: 60000
fleet:
  min_instances: 3
  desired_instances: 6
  max_instances: 12
  worker_processes_per_instance: 4
  instance_type: c7i.xlarge
"""


def _plan(tmp_path: Path, env_text: str):  # type: ignore[no-untyped-def]
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "test.yaml").write_text(env_text)
    return make_plan(load_settings("test", tmp_path, environ={}))


def test_small_table(tmp_path: Path) -> None:
    plan = _plan(tmp_path, SMALL)
    expected = {
        "partitions_N": 1,  # max(ceil(100/3000 + 50/1000) = ceil(0.083) = 1, ceil(2/10) = 1)
        "write_units_per_partition": 50,  # 50 WCU / 1
        "shards_max": 6,  # 6N
        "worker_processes_M": 4,  # default fleet: 2 instances x 2 processes
        "leases_per_worker_peak": 2,  # ceil(6/4)
        "max_leases_for_worker_min": 1,  # ceil(1/4)
        "max_leases_for_worker_max": 2,  # ceil(6/4)
        "max_leases_for_worker_suggested": 2,  # 1 + 1
        "recommended_instances": 1,
        # heartbeats 4 / 3.308 s (renewal = 10000//3 - 25 ms) + checkpoints 1 shard / 1 s
        "lease_table_write_units": 4 / 3.308 + 1,
        # scan of 2 leases x 300 B + 4 heartbeats x 120 B = 1080 B -> one 4 KB page -> 0.5 RCU;
        # 4 workers x 0.5 x (1/3.333 s + 1/60 s)
        "lease_table_read_units": 4 * 0.5 * (1000 / 3333 + 1 / 60),
        # KCL: 2 leases renewed every 10/3 s = 0.6 + 1 checkpoint/s
        "kcl_lease_table_write_units": 1.6,
        # KCL: 4 workers x 0.5 x (1/20 s + 1/60 s)
        "kcl_lease_table_read_units": 4 * 0.5 * (1 / 20 + 1 / 60),
        "scale_out_threshold": 2,  # 2 x N
    }
    for name, value in expected.items():
        assert plan.value(name) == pytest.approx(value, rel=1e-6), name
    assert not any("past the point where the KCL defaults need tuning" in w for w in plan.warnings)


def test_large_table(tmp_path: Path) -> None:
    plan = _plan(tmp_path, LARGE)
    expected = {
        "partitions_N": 70,  # max(ceil(30000/3000 + 60000/1000) = 70, ceil(200/10) = 20)
        "write_units_per_partition": 60000 / 70,  # 857.1 WCU/s per partition
        "shards_during_rollover": 140,
        "shards_max": 420,
        "worker_processes_M": 24,  # 6 x 4
        "leases_per_worker_peak": 18,  # ceil(420/24) = ceil(17.5)
        "max_leases_for_worker_min": 3,  # ceil(70/24)
        "max_leases_for_worker_max": 18,
        "max_leases_for_worker_suggested": 6,
        # ceil(420 / (500 x 4)) = 1; ceil(60000 / (5000 x 4)) = 3
        "recommended_instances": 3,
        "threads_per_worker": 19,  # 16 + 3
        # 1000 records x 2 KB (two 1 KB images) x 18 leases x 2 / 1024
        "memory_per_worker": 1000 * 2 * 18 * 2 / 1024,
        "lease_table_write_units": 24 / 3.308 + 70,  # 7.26 + 70 = 77.26
        # 140 leases x 300 B + 24 x 120 B = 44 880 B -> 11 pages -> 5.5 RCU per scan
        "lease_table_read_units": 24 * 5.5 * (1000 / 3333 + 1 / 60),  # 41.80
        "kcl_lease_table_write_units": 140 / (10 / 3) + 70,  # 42 + 70 = 112
        # 140 x 300 B = 42 000 B -> 11 pages -> 5.5 RCU
        "kcl_lease_table_read_units": 24 * 5.5 * (1 / 20 + 1 / 60),  # 8.8
        "scale_out_threshold": 140,
    }
    for name, value in expected.items():
        assert plan.value(name) == pytest.approx(value, rel=1e-6), name
    assert any("past the point where the KCL defaults need tuning" in w for w in plan.warnings)
    # Default 10/10 leases-table capacity cannot carry this fleet.
    assert any("initial_lease_table_write_capacity is 10" in w for w in plan.warnings)


def test_plan_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "test.yaml").write_text(LARGE)
    assert main(["plan", "--env", "test", "--config-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    figures = {f["name"]: f for f in out["figures"]}
    assert figures["partitions_N"]["value"] == 70
    assert "ceil" in figures["partitions_N"]["formula"]


CONFIG = Path(__file__).resolve().parents[3] / "config"


@pytest.mark.parametrize("env", ["local", "dev", "prod"])
def test_no_shipped_environment_is_warned_about(
    env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner and the shipped config agree: `consumer plan --env <env>` as shipped prints no
    warning, and no note that contradicts the file: only the account a deployable environment leaves
    to its user (a step before deploying) and, for a table past the KCL defaults, that the file's
    tuning was checked against the figures."""
    for name in [n for n in os.environ if n.startswith("CONSUMER_")]:
        monkeypatch.delenv(name)
    plan = make_plan(load_settings(env, CONFIG, environ={}))
    assert plan.warnings == []
    needs_account = [n for n in plan.notes if n.startswith("before deploying: ") and "set account" in n]
    assert len(needs_account) == (env != "local"), plan.notes
    agreeing = [n for n in plan.notes if n.endswith("are set: checked against the figures above")]
    assert sorted(plan.notes) == sorted(needs_account + agreeing), plan.notes
    assert main(["plan", "--env", env, "--config-dir", str(CONFIG)]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.out + captured.err
    assert "recommended" not in "".join(plan.notes) and "needs ~" not in "".join(plan.notes)


def test_prod_is_checked_against_its_own_figures() -> None:
    """config/prod.yaml: N = 44, M = 3 x 4 = 12; advice 4..22 leases per worker, suggested 8, and 2
    instances for its writes. Its cap is the suggestion; its 3 instances are the group's minimum; the
    smallest fleet holds 8 x 12 = 96 leases, a rollover's 2N = 88; the table is past the KCL defaults
    but tuned (a note)."""
    plan = make_plan(load_settings("prod", CONFIG, environ={}))
    assert plan.value("partitions_N") == 44
    assert (plan.value("max_leases_for_worker_min"), plan.value("max_leases_for_worker_max")) == (4, 22)
    assert plan.value("max_leases_for_worker_suggested") == 8
    assert dict(plan.inputs)["worker.max_leases_for_worker"] == "8"
    assert plan.value("recommended_instances") == 2
    assert plan.value("leases_held_at_min_instances") == 96
    tuning = next(n for n in plan.notes if "KCL defaults need tuning" in n)
    assert "909 WCU/s per partition is more than 100" in tuning and "are set" in tuning
    assert "44 partitions is more than" not in tuning


def test_a_smallest_fleet_that_cannot_hold_a_rollover_is_a_warning(tmp_path: Path) -> None:
    # N = 70, 3 instances x 4 processes = 12 at min_instances: a cap of 10 holds 120 >= N but < 2N = 140.
    plan = _plan(tmp_path, LARGE + "worker:\n  max_leases_for_worker: 10\n")
    assert plan.value("leases_held_at_min_instances") == 120
    warning = next(w for w in plan.warnings if "2N = 140" in w)
    assert "raise max_leases_for_worker to 12 or fleet.min_instances" in warning


def test_on_the_emulator_n_is_the_emulators_partition_count(tmp_path: Path) -> None:
    """An emulator environment's capacity figures would say N = 1; the emulator runs 6 partitions."""
    plan = _plan(tmp_path, SMALL + "endpoint_url: http://127.0.0.1:4700\nemulator: {partitions: 6}\n")
    assert plan.value("partitions_N") == 6
    assert "emulator.partitions" in next(f.formula for f in plan.figures if f.name == "partitions_N")
    assert dict(plan.inputs)["emulator.partitions"] == "6"
    # The emulator enforces no capacity: the default 10 WCU leases table is a note there, not a warning.
    assert not any("leases table needs" in w for w in plan.warnings)


def test_values_that_put_the_fleet_at_risk_are_warnings_and_choices_are_notes(tmp_path: Path) -> None:
    # N = 70, M = 24: the cap 40 is above 6N/M = 18 (a note); 2 instances are fewer than the 3 recommended.
    plan = _plan(tmp_path, LARGE + "worker:\n  max_leases_for_worker: 40\n")
    assert any(
        "max_leases_for_worker 40 is above 6N/M = 18" in n and "as if unbounded" in n for n in plan.notes
    )
    few = LARGE.replace(
        "min_instances: 3\n  desired_instances: 6", "min_instances: 1\n  desired_instances: 2"
    )
    plan = _plan(tmp_path, few)
    assert any("desired_instances 2 is fewer than the 3 recommended" in w for w in plan.warnings)
    # A cap the smallest fleet cannot hold N with: 3 leases x (3 instances x 4 processes) = 36 < 70.
    tight = LARGE + "worker:\n  max_leases_for_worker: 3\n"
    plan = _plan(tmp_path, tight)
    assert any("the smallest fleet cannot hold every open shard" in w for w in plan.warnings)


def test_a_planning_default_never_set_is_not_judged(tmp_path: Path) -> None:
    """No fleet section: desired_instances is its default 2 where 1 is recommended; nobody chose it."""
    plan = _plan(tmp_path, SMALL)
    assert plan.value("recommended_instances") == 1
    assert not any("desired_instances" in line for line in plan.warnings + plan.notes)


def test_unbounded_cap_and_matching_fleet_are_not_flagged(tmp_path: Path) -> None:
    plan = _plan(tmp_path, SMALL + "fleet: {min_instances: 1, desired_instances: 1, max_instances: 2}\n")
    assert dict(plan.inputs)["worker.max_leases_for_worker"] == "unbounded"
    assert not any("configured" in w for w in plan.warnings)


def test_plan_prints_its_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "test.yaml").write_text(LARGE)
    assert main(["plan", "--env", "test", "--config-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Inputs" in out and "fleet.desired_instances" in out and "max_leases_for_worker" in out

"""Chaos schedules are pure plans: what each one must contain, inside the load window, repeatably."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.faults import FaultSettings
from tools.cli import main
from tools.demo.chaos import (
    FAULT_SECONDS,
    KINDS,
    PAUSE_BANDS,
    SCHEDULES,
    ChaosAction,
    chaos_plan,
    dense_pause_plan,
    schedule_plan,
    slow_table_plan,
    slow_table_profiles,
)

FAILOVER_MILLIS = 3000
REPO = Path(__file__).resolve().parents[3]


def _inside_window(plan: list[ChaosAction], duration: float) -> bool:
    return all(duration * 0.1 - 1e-3 <= a.at_seconds <= duration * 0.85 + 1e-3 for a in plan)


@given(st.integers(0, 10_000), st.floats(0, 600))
@settings(max_examples=60)
def test_mixed_is_todays_plan_with_its_durations_filled_in(seed: int, duration: float) -> None:
    plan = schedule_plan("mixed", seed, duration, FAILOVER_MILLIS)
    assert plan == chaos_plan(seed, duration)
    assert {a.kind for a in plan} == set(KINDS)
    for action in plan:
        if action.kind == "pause":
            assert (action.seconds, action.workers, action.whole_fleet) == (4.5, 1, False)
        elif action.kind.endswith("faults"):
            assert action.seconds == FAULT_SECONDS and action.scope == "all" and action.faults
        else:
            assert action.seconds == 0 and not action.faults


@given(st.integers(0, 10_000), st.floats(1, 600))
@settings(max_examples=100)
def test_dense_pause_has_every_band_and_multi_worker_pauses_close_together(
    seed: int, duration: float
) -> None:
    plan = dense_pause_plan(seed, duration, FAILOVER_MILLIS)
    assert plan == dense_pause_plan(seed, duration, FAILOVER_MILLIS)
    assert {a.kind for a in plan} == {"pause"}
    assert _inside_window(plan, duration)
    starts = [a.at_seconds for a in plan]
    assert starts == sorted(starts)
    assert all(later - earlier <= 2.0 + 1e-3 for earlier, later in itertools.pairwise(starts))
    factors = [a.seconds / (FAILOVER_MILLIS / 1000) for a in plan]
    assert all(PAUSE_BANDS["just-shorter"][0] - 1e-3 <= f <= PAUSE_BANDS["long"][1] + 1e-3 for f in factors)
    assert any(f < 1 for f in factors)  # wakes after fencing itself, before anybody may take over
    assert any(1 < f <= PAUSE_BANDS["just-longer"][1] + 1e-3 for f in factors)
    assert any(f >= PAUSE_BANDS["long"][0] - 1e-3 for f in factors)
    assert any(a.workers >= 2 for a in plan)
    assert any(a.whole_fleet and a.seconds < FAILOVER_MILLIS / 1000 for a in plan)


def test_dense_pause_is_dense_over_a_demo_length_run() -> None:
    plan = dense_pause_plan(1, 60, FAILOVER_MILLIS)
    assert len(plan) >= 20  # 45 s of window, a pause every 0.4-2 s
    longer = [a for a in plan if a.seconds > FAILOVER_MILLIS / 1000]
    shorter = [a for a in plan if a.seconds < FAILOVER_MILLIS / 1000]
    assert len(longer) >= 5 and len(shorter) >= 3
    # Pauses overlap: one starts before the previous one has ended.
    assert any(b.at_seconds < a.at_seconds + a.seconds for a, b in itertools.pairwise(plan))


@given(st.integers(0, 10_000), st.floats(1, 600))
@settings(max_examples=100)
def test_slow_table_covers_long_stretches_of_each_kind_on_the_leases_tables_only(
    seed: int, duration: float
) -> None:
    plan = slow_table_plan(seed, duration, FAILOVER_MILLIS)
    assert plan == slow_table_plan(seed, duration, FAILOVER_MILLIS)
    assert {a.kind for a in plan} == {"table-faults"} and {a.scope for a in plan} == {"leases"}
    assert _inside_window(plan, duration)
    assert all(a.at_seconds + a.seconds <= duration * 0.85 + 1e-3 for a in plan)
    window = duration * 0.75
    profiles = slow_table_profiles(FAILOVER_MILLIS)
    assert {a.faults for a in plan} == {tuple(p.items()) for p in profiles.values()}
    for changes in profiles.values():
        stretches = sorted((a for a in plan if a.fault_changes == changes), key=lambda a: a.at_seconds)
        # Long: together at least a third of the window; never overlapping themselves (the undo of
        # one stretch must not end another of the same kind).
        assert sum(a.seconds for a in stretches) >= window / 3 - 1e-3
        assert all(a.at_seconds + a.seconds <= b.at_seconds + 1e-3 for a, b in itertools.pairwise(stretches))


def test_slow_table_profiles_are_valid_emulator_settings_with_disjoint_names() -> None:
    profiles = slow_table_profiles(FAILOVER_MILLIS)
    names = [name for changes in profiles.values() for name in changes]
    assert len(names) == len(set(names))
    FaultSettings().updated({name: value for changes in profiles.values() for name, value in changes.items()})
    latency = profiles["latency"]
    assert latency["table_latency_tail_millis"] > 10 * latency["table_latency_millis"]  # a long tail
    assert profiles["ambiguous"]["table_ambiguous_rate"] > 0
    assert 0 < profiles["stale"]["table_stale_scan_millis"] < FAILOVER_MILLIS


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_schedule_plans_something_for_the_demo_and_the_tests_durations(schedule: str) -> None:
    for duration in (24.0, 60.0):
        plan = schedule_plan(schedule, 1, duration, FAILOVER_MILLIS)  # type: ignore[arg-type]
        assert plan and _inside_window(plan, duration)


def test_an_unknown_schedule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown chaos schedule"):
        schedule_plan("calm", 1, 60, FAILOVER_MILLIS)  # type: ignore[arg-type]


def test_the_demo_command_takes_a_schedule_only_with_chaos(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = [
        "demo",
        "--env",
        "local",
        "--config-dir",
        str(REPO / "config"),
        "--workdir",
        str(tmp_path / "demo"),
    ]
    assert main([*config, "--schedule", "dense-pause"]) == 2  # refused before anything starts
    assert "give --chaos SEED too" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()
    with pytest.raises(SystemExit):
        main([*config, "--chaos", "1", "--schedule", "calm"])
    assert "invalid choice: 'calm'" in capsys.readouterr().err

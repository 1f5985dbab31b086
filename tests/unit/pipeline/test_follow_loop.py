"""The follow loop's decisions (pipeline/follow.py) with its runs, maintenance and clock faked: a
run that lost a race runs again at once, a failed one after a pause, maintenance comes on its
interval, and the freshness reported is how old the oldest change was at its commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline import follow as following
from pipeline.errors import BadChangeLogError, ConcurrentRunError, HalfCommittedError
from pipeline.maintenance import MaintenanceResult
from pipeline.snapshot_run import SnapshotResult
from tests.pipeline.fixtures import settings_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_races_are_run_again_failures_wait_and_maintenance_keeps_its_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(tmp_path, freshness_seconds=60, maintenance_interval_minutes=1)
    clock = Clock()
    outcomes: list[Any] = [
        SnapshotResult("000001", False, new_changes=5, oldest_change=990.0),
        ConcurrentRunError("another run committed"),
        HalfCommittedError("tombstones only"),
        SnapshotResult("000002", False, new_changes=7, oldest_change=1000.0),
        BadChangeLogError("3 malformed lines"),
        SnapshotResult("000002", True),
        SnapshotResult("000003", False, new_changes=1, oldest_change=None),
    ]
    runs: list[int] = []

    def run_snapshot(*_: Any, **__: Any) -> SnapshotResult:
        runs.append(len(runs))
        clock.now += 20  # every run takes 20 s
        outcome = outcomes[len(runs) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    passes: list[float] = []

    def maintain(*_: Any, now: float, **__: Any) -> MaintenanceResult:
        passes.append(now)
        return MaintenanceResult()

    monkeypatch.setattr(following, "run_snapshot", run_snapshot)
    monkeypatch.setattr(following, "maintain", maintain)
    reported: list[float] = []
    done = following.follow(
        None,  # type: ignore[arg-type]  (no Spark: the runs are faked)
        settings,
        stop=lambda: len(runs) == len(outcomes),
        tables=object(),  # type: ignore[arg-type]
        report=reported.append,
        clock=clock,
        sleep=clock.sleep,
    )
    assert (done.runs, done.changes, done.retried, done.failed) == (3, 13, 2, 1)
    # Commits at 1020 (oldest 990) and 1080 (oldest 1000); nothing waiting; no creation time.
    assert reported == [30.0, 80.0, 0.0, 0.0]
    assert clock.slept == [6.0, 6.0]  # after the failure, and after the up-to-date run: a tenth of 60 s
    # Maintenance between runs, once a minute at most: after the run that ended at 1080 (the first
    # past 60 s), not after the one at 1126 (46 s later), nor after the last (the loop is stopping).
    assert passes == [1080.0]


def test_the_poll_is_a_tenth_of_the_freshness_within_bounds() -> None:
    assert following.poll_seconds(60) == 6.0
    assert following.poll_seconds(10) == 1.0
    assert following.poll_seconds(600) == 10.0


def test_an_idle_follow_says_once_that_it_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five idle polls, a run with new changes, three idle polls: one "up to date" line per idle
    stretch, and the working run's lines as the run printed them."""
    settings = settings_for(tmp_path, freshness_seconds=60, maintenance_interval_minutes=60)
    clock = Clock()
    outcomes = [True] * 5 + [False] + [True] * 3
    runs: list[int] = []

    def run_snapshot(*_: Any, progress: Any, **__: Any) -> SnapshotResult:
        runs.append(len(runs))
        progress("[1/4] change log: objects to read")
        if outcomes[len(runs) - 1]:
            progress("[4/4] snapshot is up to date; nothing written")
            return SnapshotResult("000001", True, objects_already_merged=4)
        for step in ("[2/4] read", "[3/4] merged", "[4/4] committed"):
            progress(step)
        return SnapshotResult("000002", False, new_changes=3, oldest_change=1000.0)

    monkeypatch.setattr(following, "run_snapshot", run_snapshot)
    lines: list[str] = []
    following.follow(
        None,  # type: ignore[arg-type]  (no Spark: the runs are faked)
        settings,
        stop=lambda: len(runs) == len(outcomes),
        tables=object(),  # type: ignore[arg-type]
        progress=lines.append,
        clock=clock,
        sleep=clock.sleep,
        maintenance=False,
    )
    waiting = (
        "[follow] up to date (4 object(s) merged): listing the change log every 6 s until new objects land"
    )
    assert lines == [
        waiting,
        "[1/4] change log: objects to read",
        "[2/4] read",
        "[3/4] merged",
        "[4/4] committed",
        waiting,
    ]

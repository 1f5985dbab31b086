"""The kernel's hang watchdog: a simulated thread blocked outside the kernel (on a real lock or event,
a port the simulation does not model) ends the history with SimHangError; a process that was merely
stopped (SIGSTOP on a long form) is not declared hung when it resumes.

The long form (bench/whole_worker.py) once died with "simulated thread w7-shard-1 blocked outside the
kernel" at the moment it was resumed after a six-minute SIGSTOP: the hand-over had been awaited with
one 120 s timeout, which the stop used up."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import simulation.kernel as kernel_module
from simulation.kernel import Group, Kernel, SimHangError


@pytest.fixture
def short_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_module, "HANG_SECONDS", 0.3)
    monkeypatch.setattr(kernel_module, "HANG_SLICE", 0.05)


def run_one(body_seconds: float) -> list[str]:
    """One simulated thread that blocks outside the kernel for ``body_seconds`` of real time, then
    sleeps in simulated time; returns what it got to do."""
    kernel = Kernel(seed=1)
    done: list[str] = []

    def body() -> None:
        time.sleep(body_seconds)  # real time: outside the kernel
        kernel.sleep(1_000)
        done.append("after")

    kernel.spawn("t", Group("g"), body)
    try:
        kernel.run_until(kernel.now + 5_000)
    finally:
        kernel.shutdown()
    return done


@pytest.mark.usefixtures("short_watchdog")
def test_a_thread_blocked_outside_the_kernel_ends_the_history() -> None:
    with pytest.raises(SimHangError, match="blocked outside the kernel"):
        run_one(1.0)


@pytest.mark.usefixtures("short_watchdog")
def test_a_quick_step_outside_the_kernel_is_not_a_hang() -> None:
    assert run_one(0.01) == ["after"]


@pytest.fixture
def stopped_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every reading of the monotonic clock inside the kernel is a minute later than the one before,
    as when the process is stopped between them."""
    readings = iter(range(0, 10**9, 60))
    monkeypatch.setattr(kernel_module, "monotonic", lambda: float(next(readings)))
    yield


@pytest.mark.usefixtures("short_watchdog", "stopped_process")
def test_time_the_process_spent_stopped_does_not_count_towards_a_hang() -> None:
    # Blocked 1 s of real time (past HANG_SECONDS), but every slice of the wait looked like a stop.
    assert run_one(1.0) == ["after"]

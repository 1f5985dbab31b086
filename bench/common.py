"""Shared by every benchmark: repeated measurements, the RATIO line, and the machine description.

Every figure is a ratio of two things measured in the same run (this machine is shared and noisy);
each is taken ``repeats`` times and reported as min / median / max so the noise is visible.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Ratio:
    """One row of bench/RESULTS.md: a figure measured ``len(values)`` times against its goal.

    ``goal``: ``"<=x"``, ``">=x"``, ``"=x"`` or ``"stated"`` (no goal: reported beside the others).
    ``ok``: the benchmark's own reading; :attr:`verdict` is the rule's, which a benchmark may make
    stricter (``ok=False``), never looser. ``worst``: the bound the worst value must meet, where a
    goal states a looser one than the goal itself (``None``: every value meets the goal).
    ``model``: empty when both sides of the ratio are measurements; otherwise what is a model (a
    formula, a simulation's clock), shown in the row's basis column.
    """

    name: str
    values: tuple[float, ...]
    goal: str
    ok: bool
    method: str
    worst: float | None = None
    model: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def verdict(self) -> str:
        """``stated`` without a goal; ``ok`` when the median meets the goal, the worst value meets
        :attr:`worst` (the goal itself unless the row states a looser bound) and the benchmark
        agrees; ``short`` otherwise."""
        if self.goal == "stated":
            return "stated"
        return "ok" if self.ok and meets(self.goal, self.worst, self.values) else "short"

    @property
    def goal_text(self) -> str:
        """The goal as RESULTS.md states it, the worst value's bound included."""
        if self.worst is None or self.goal == "stated":
            return self.goal
        return f"{self.goal} (worst {self.goal[:2]}{self.worst:g})"

    def line(self) -> str:
        return f"RATIO {self.name}={self.median:.3f} goal={self.goal_text} {self.verdict}"

    def spread(self) -> str:
        if len(self.values) == 1:
            return f"one value {self.values[0]:.3f}"
        return f"min {min(self.values):.3f} / median {self.median:.3f} / max {max(self.values):.3f}"


def meets(goal: str, worst: float | None, values: tuple[float, ...]) -> bool:
    """The rule every goal is checked by: the median meets the goal and the worst value meets
    ``worst`` (``None``: the goal itself, i.e. every value meets it). ``=x`` holds for every value."""
    median = statistics.median(values)
    if goal.startswith("<="):
        bound = float(goal[2:])
        return median <= bound and max(values) <= (bound if worst is None else worst)
    if goal.startswith(">="):
        bound = float(goal[2:])
        return median >= bound and min(values) >= (bound if worst is None else worst)
    if goal.startswith("="):
        return all(value == float(goal[1:]) for value in values)
    raise ValueError(f"a goal is <=x, >=x, =x or stated, not {goal!r}")


def repeat(measure: Callable[[], float], repeats: int) -> tuple[float, ...]:
    return tuple(measure() for _ in range(repeats))


def at_most(
    name: str,
    values: tuple[float, ...],
    goal: float,
    method: str,
    *,
    worst: float | None = None,
    model: str = "",
) -> Ratio:
    return Ratio(name, values, f"<={goal:g}", True, method, worst, model)


def at_least(
    name: str,
    values: tuple[float, ...],
    goal: float,
    method: str,
    *,
    worst: float | None = None,
    model: str = "",
) -> Ratio:
    return Ratio(name, values, f">={goal:g}", True, method, worst, model)


def stated(name: str, values: tuple[float, ...], method: str, *, model: str = "") -> Ratio:
    """A figure reported beside the others, with no goal of its own."""
    return Ratio(name, values, "stated", True, method, None, model)


def in_fresh_process(module: str, *args: str, timeout: float) -> dict[str, Any]:
    """Run ``python -m <module> *args`` from the repository root in a new interpreter (a heap and a
    collector untouched by this one) and return the JSON object its last line of output prints."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the measuring process failed:\n{done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, Python {platform.python_version()}"

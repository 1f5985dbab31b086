"""Shared by every benchmark: repeated measurements, the RATIO line, and the machine description.

Every figure is a ratio of two things measured in the same run (this machine is shared and noisy);
each is taken ``repeats`` times and reported as min / median / max so the noise is visible.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Ratio:
    name: str
    values: tuple[float, ...]
    goal: str
    ok: bool
    method: str

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def line(self) -> str:
        return f"RATIO {self.name}={self.median:.3f} goal={self.goal} {'ok' if self.ok else 'short'}"

    def spread(self) -> str:
        return f"min {min(self.values):.3f} / median {self.median:.3f} / max {max(self.values):.3f}"


def repeat(measure: Callable[[], float], repeats: int) -> tuple[float, ...]:
    return tuple(measure() for _ in range(repeats))


def at_most(name: str, values: tuple[float, ...], goal: float, method: str) -> Ratio:
    return Ratio(name, values, f"<={goal:g}", statistics.median(values) <= goal, method)


def at_least(name: str, values: tuple[float, ...], goal: float, method: str) -> Ratio:
    return Ratio(name, values, f">={goal:g}", statistics.median(values) >= goal, method)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, Python {platform.python_version()}"

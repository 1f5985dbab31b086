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

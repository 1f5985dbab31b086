"""CPU and memory of this worker process, sampled at each metrics flush.

On EC2 the CloudWatch agent also reports host CPU and memory; these per-process gauges are what
tells workers on one host apart (CPU and memory per worker). Only the standard library is
used: ``os.times`` for CPU seconds and ``/proc/self/statm`` for resident memory (Linux), with
``resource``'s peak resident size as the fallback elsewhere.
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path
from typing import Protocol

from ground.clock import Clock

_STATM = Path("/proc/self/statm")


class _GaugeTarget(Protocol):
    def gauge(
        self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None
    ) -> None: ...


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def resident_megabytes() -> float:
    try:
        resident_pages = int(_STATM.read_text().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / 1_048_576
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is in kilobytes on Linux and in bytes on macOS.
        return peak / 1_048_576 if sys.platform == "darwin" else peak / 1024


class ProcessSampler:
    """Publishes ``CpuUtilization`` (percent of one core) and ``MemoryResident`` (MB)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._last_cpu = cpu_seconds()
        self._last_at = clock.monotonic_millis()

    def record(self, target: _GaugeTarget) -> None:
        now = self._clock.monotonic_millis()
        cpu = cpu_seconds()
        elapsed_seconds = (now - self._last_at) / 1000
        if elapsed_seconds > 0:
            percent = max(0.0, (cpu - self._last_cpu) / elapsed_seconds * 100)
            target.gauge("Process", "CpuUtilization", round(percent, 2), "Percent")
        self._last_cpu, self._last_at = cpu, now
        target.gauge("Process", "MemoryResident", round(resident_megabytes(), 2), "Megabytes")

"""Time, passed in: decision code never reads the system clock itself.

``monotonic_millis`` measures intervals on this host (immune to wall-clock jumps) *including time
the host spent suspended*: fencing is judged on it, and a VM resumed after a suspend must see that
its heartbeat is old (``CLOCK_MONOTONIC`` stops during a suspend on Linux; ``CLOCK_BOOTTIME`` does
not). ``wall_millis`` is comparable across hosts only within the assumed skew bound
(``worker.max_clock_skew_millis``).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic_millis(self) -> int: ...

    def wall_millis(self) -> int: ...

    def sleep(self, millis: float) -> None: ...


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def _suspend_aware_ns() -> int:
    if _BOOTTIME is not None:
        return time.clock_gettime_ns(_BOOTTIME)
    return time.monotonic_ns()  # macOS / Windows: their monotonic clocks already count sleep


class SystemClock:
    def monotonic_millis(self) -> int:
        return _suspend_aware_ns() // 1_000_000

    def wall_millis(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, millis: float) -> None:
        if millis > 0:
            time.sleep(millis / 1000)


class FakeClock:
    """A clock for tests: time moves only when ``advance`` (or ``sleep``) is called.

    ``skew_millis`` offsets this clock's wall time, to model hosts whose clocks disagree.
    """

    def __init__(self, start_millis: int = 1_700_000_000_000, skew_millis: int = 0) -> None:
        self._now = start_millis
        self._skew = skew_millis
        self._lock = threading.Lock()

    def monotonic_millis(self) -> int:
        with self._lock:
            return self._now

    def wall_millis(self) -> int:
        with self._lock:
            return self._now + self._skew

    def advance(self, millis: int) -> None:
        with self._lock:
            self._now += int(millis)

    def sleep(self, millis: float) -> None:
        self.advance(int(millis))

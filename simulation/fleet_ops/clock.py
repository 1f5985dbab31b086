"""Simulated time for the deployed fleet: a seeded event queue on a wall clock in seconds.

The fleet's actors (the group, each instance's boot and watchdog, the scaling and health alarms, the
follow schedule) are plain callbacks, not threads: what they run of the product (the watchdog's
step, the health judge) is synchronous code that takes the time as an argument. Events at the same
moment run in an order drawn from the history's seed, so a seed replays one history exactly.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable

# Simulated wall time starts here (2027-01-15), so times look like the epoch seconds the product reads.
WALL0 = 1_800_000_000.0

Action = Callable[[], None]


class Loop:
    def __init__(self, rng: random.Random, start: float = WALL0) -> None:
        self.now = start
        self.start = start
        self._rng = rng
        self._heap: list[tuple[float, float, int, Action]] = []
        self._order = itertools.count()
        self.events = 0

    def at(self, when: float, action: Action) -> None:
        heapq.heappush(self._heap, (max(when, self.now), self._rng.random(), next(self._order), action))

    def after(self, delay: float, action: Action) -> None:
        self.at(self.now + delay, action)

    def every(self, period: float, action: Callable[[], bool | None], phase: float = 0.0) -> None:
        """``action`` every ``period`` from ``now + phase`` until it returns False."""

        def tick() -> None:
            if action() is not False:
                self.after(period, tick)

        self.after(phase, tick)

    def run_until(self, end: float, stop: Callable[[], bool] | None = None) -> None:
        while self._heap and self._heap[0][0] <= end:
            if stop is not None and stop():
                return
            when, _, _, action = heapq.heappop(self._heap)
            self.now = when
            self.events += 1
            action()
        self.now = max(self.now, end)

    @property
    def elapsed(self) -> float:
        return self.now - self.start

"""Is this instance's fleet of worker processes healthy? Read from outside the workers.

Each ``consumer run`` touches its heartbeat file (``--heartbeat-file``) after every lease-taking
round: the same event the ``NumWorkers`` gauge reports and the ``workers-silent`` alarm watches, so
"healthy" here means "its lease loop is running". A worker that crashes before its first round,
hangs, or cannot reach its tables never gets (or stops getting) a fresh heartbeat. A worker that
crash-loops *after* a round would keep touching it, so the watchdog also counts systemd restarts.

Standard library only: the bootstrap waits on :func:`fresh_workers` before the virtualenv's
packages are in use.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from deploy.plan import BootPlan, Layout


def heartbeat_ages(plan: BootPlan, layout: Layout, now: float | None = None) -> dict[str, float | None]:
    """Seconds since each worker's last heartbeat (``None``: none yet), by instance number."""
    current = time.time() if now is None else now
    ages: dict[str, float | None] = {}
    for instance in range(1, plan.worker_processes + 1):
        path = layout.heartbeat(str(instance))
        try:
            ages[str(instance)] = max(0.0, current - path.stat().st_mtime)
        except FileNotFoundError:
            ages[str(instance)] = None
    return ages


def fresh_workers(plan: BootPlan, layout: Layout, since: float, now: float | None = None) -> list[str]:
    """The workers with a heartbeat written after ``since`` and younger than the allowed age."""
    current = time.time() if now is None else now
    fresh = []
    for instance, age in heartbeat_ages(plan, layout, current).items():
        if age is not None and current - age >= since and age <= plan.heartbeat_max_age_seconds:
            fresh.append(instance)
    return fresh


def wait_for_healthy(
    plan: BootPlan,
    layout: Layout,
    since: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Poll until every worker has a fresh heartbeat, or ``plan.health_timeout_seconds`` pass."""
    deadline = clock() + plan.health_timeout_seconds
    while True:
        if len(fresh_workers(plan, layout, since)) == plan.worker_processes:
            return True
        if clock() >= deadline:
            return False
        sleep(2.0)


@dataclass
class HealthJudge:
    """Turns observations into a verdict: ``None`` while healthy, else the reason it is not.

    * a worker whose heartbeat is older than ``heartbeat_max_age_seconds`` (or missing) once the
      grace period after boot has passed is unhealthy: hung, crashed before a round, or cut off;
    * ``crash_loop_restarts`` systemd restarts of the workers within ``crash_loop_window_seconds``
      is a crash loop, even if each run gets as far as one heartbeat.
    """

    plan: BootPlan
    started: float
    grace_seconds: float
    _restarts: deque[tuple[float, int]] = field(default_factory=deque)

    def observe(self, now: float, ages: dict[str, float | None], restarts: int | None) -> str | None:
        if restarts is not None:
            self._restarts.append((now, restarts))
            while self._restarts and now - self._restarts[0][0] > self.plan.crash_loop_window_seconds:
                self._restarts.popleft()
            oldest = self._restarts[0][1]
            if restarts - oldest >= self.plan.crash_loop_restarts:
                return (
                    f"workers restarted {restarts - oldest} times within "
                    f"{self.plan.crash_loop_window_seconds} s (crash loop)"
                )
        if now - self.started < self.grace_seconds:
            return None
        stale = sorted(
            instance
            for instance, age in ages.items()
            if age is None or age > self.plan.heartbeat_max_age_seconds
        )
        if stale:
            return (
                f"worker(s) {', '.join(stale)} reported no lease-taking round within "
                f"{self.plan.heartbeat_max_age_seconds} s"
            )
        return None

"""Is this instance's fleet of worker processes healthy? Read from outside the workers.

Each ``consumer run`` rewrites its heartbeat file (``--heartbeat-file``) at every lease-taking round
it attempts: the file's time is the last attempt, its content the last round whose reads succeeded
and, while rounds fail, why (``consumer.telemetry.health.HeartbeatFile``). So the watchdog tells
apart two things that the file's age alone would not:

* a loop that stopped (no attempt for ``heartbeat_max_age_seconds``: hung, crashed, never started);
* a loop that runs but whose rounds fail (the leases or workers table refuses or cannot be reached).

Neither is blamed on the instance by itself. A DynamoDB brownout makes every worker of the fleet
fail its rounds at once, and marking every instance unhealthy would replace the whole fleet with
instances that fail the same way (while the churn deepens the throttling). So the judge asks
how the rest of the fleet is doing (:class:`PeerView`, the watchdog's own read of both tables,
``deploy.watchdog.WorkersTableProbe``) and blames the instance only when the failure is its own:

* its processes crash-loop (``crash_loop_restarts`` systemd restarts within the window);
* its workers fail or stall while workers on other instances are fine: their heartbeat rows are
  fresh *and* say that their last lease-taking round succeeded within the age limit (a heartbeat
  alone is written by another loop, which goes on while every leases-table round fails);
* its loops stalled while both tables answer the watchdog (nothing outside is failing).

When the watchdog cannot read the leases table or the workers table either, or nobody on any
instance is fine, the failure is the fleet's: nothing is marked (the watchdog says so once). So
either table failing alone, or both, replaces nothing. The bootstrap waits on
:func:`fresh_workers` (a successful round since boot). Standard library only: the bootstrap runs
before the virtualenv's packages are in use.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from deploy.plan import BootPlan, Layout


@dataclass(frozen=True)
class Heartbeat:
    """One worker's heartbeat file: seconds since its last round attempt and since its last good round."""

    attempt_age: float | None  # None: no file yet
    ok_age: float | None  # None: no good round yet
    ok_at: float | None  # wall seconds of the last good round
    error: str | None = None


def read_heartbeat(path: object, now: float) -> Heartbeat:
    """The file's mtime is the last attempt; its JSON content ``{"at", "ok_at", "error"}`` (wall
    milliseconds) the rest. A file holding a bare number (an older worker) is a good round at mtime."""
    from pathlib import Path

    file = Path(str(path))
    try:
        attempted = file.stat().st_mtime
        text = file.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return Heartbeat(None, None, None)
    ok_at: float | None = attempted
    error: str | None = None
    try:
        content = json.loads(text)
    except ValueError:
        content = None
    if isinstance(content, dict):
        ok_millis = content.get("ok_at")
        ok_at = ok_millis / 1000 if isinstance(ok_millis, int | float) else None
        error = content.get("error") if isinstance(content.get("error"), str) else None
    return Heartbeat(
        max(0.0, now - attempted), None if ok_at is None else max(0.0, now - ok_at), ok_at, error
    )


def heartbeats(plan: BootPlan, layout: Layout, now: float | None = None) -> dict[str, Heartbeat]:
    """Each worker's heartbeat, by instance number."""
    current = time.time() if now is None else now
    return {
        str(i): read_heartbeat(layout.heartbeat(str(i)), current) for i in range(1, plan.worker_processes + 1)
    }


def fresh_workers(plan: BootPlan, layout: Layout, since: float, now: float | None = None) -> list[str]:
    """The workers with a good round since ``since`` that is younger than the allowed age."""
    current = time.time() if now is None else now
    return [
        instance
        for instance, beat in heartbeats(plan, layout, current).items()
        if beat.ok_at is not None
        and beat.ok_at >= since
        and beat.ok_age is not None
        and beat.ok_age <= plan.heartbeat_max_age_seconds
    ]


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


@dataclass(frozen=True)
class PeerView:
    """What the watchdog's own read of the tables found: whether both answered (``error`` names the
    one that did not), and how many workers on other instances are fine (a heartbeat row younger than
    failover + skew, and a lease-taking round that succeeded within the age limit)."""

    readable: bool
    fresh_peers: int = 0
    error: str | None = None


@dataclass(frozen=True)
class Judgement:
    """``unhealthy``: why the instance must be replaced; ``excused``: a failure seen and not blamed
    on the instance (said once by the watchdog)."""

    unhealthy: str | None = None
    excused: str | None = None
    why_excused: str | None = None  # "dependency" or "fleet": the watchdog says each change once


@dataclass
class HealthJudge:
    """Turns observations into a :class:`Judgement` (module docstring for the rules).

    Nothing is judged before ``grace_seconds`` after boot (the bootstrap's signal decides until
    then), except a crash loop.
    """

    plan: BootPlan
    started: float
    grace_seconds: float
    _restarts: deque[tuple[float, int]] = field(default_factory=deque)
    # Since when the watchdog's look at the fleet has shown, without a break, other instances'
    # workers fine / both tables answering (reset when they did not, or all was well).
    _peers_fine_since: float | None = None
    _answering_since: float | None = None

    def observe(
        self,
        now: float,
        beats: dict[str, Heartbeat],
        restarts: int | None,
        peers: Callable[[], PeerView] = lambda: PeerView(readable=False, error="no probe"),
    ) -> Judgement:
        if restarts is not None:
            self._restarts.append((now, restarts))
            while self._restarts and now - self._restarts[0][0] > self.plan.crash_loop_window_seconds:
                self._restarts.popleft()
            oldest = self._restarts[0][1]
            if restarts - oldest >= self.plan.crash_loop_restarts:
                return Judgement(
                    f"workers restarted {restarts - oldest} times within "
                    f"{self.plan.crash_loop_window_seconds} s (crash loop)"
                )
        if now - self.started < self.grace_seconds:
            return Judgement()
        limit = self.plan.heartbeat_max_age_seconds
        stalled = sorted(i for i, b in beats.items() if b.attempt_age is None or b.attempt_age > limit)
        failing = sorted(
            i for i, b in beats.items() if i not in stalled and (b.ok_age is None or b.ok_age > limit)
        )
        if not stalled and not failing:
            self._peers_fine_since = self._answering_since = None
            return Judgement()
        what = []
        if stalled:
            what.append(f"worker(s) {', '.join(stalled)} attempted no lease-taking round within {limit} s")
        if failing:
            errors = sorted({beats[i].error or "no good round yet" for i in failing})
            what.append(
                f"worker(s) {', '.join(failing)} had no lease-taking round succeed within {limit} s "
                f"({'; '.join(errors)[:300]})"
            )
        seen = "; ".join(what)
        view = peers()
        if not view.readable:
            self._peers_fine_since = self._answering_since = None
            return Judgement(
                excused=f"{seen}; the leases or workers table does not answer this instance's watchdog "
                f"either ({view.error}): a dependency failing, not this instance",
                why_excused="dependency",
            )
        # Others must have been fine (the table answering) for a whole age limit while mine were not:
        # when a brownout ends, the first instances back are fine a round or two before the rest,
        # whose last good round is then already older than the limit.
        self._answering_since = self._answering_since or now
        if view.fresh_peers:
            self._peers_fine_since = self._peers_fine_since or now
            if now - self._peers_fine_since >= limit:
                return Judgement(f"{seen}, while {view.fresh_peers} worker(s) on other instances are fine")
            return Judgement(
                excused=f"{seen}; workers on other instances are fine for {now - self._peers_fine_since:.0f} s "
                f"only (the fleet may be coming back from an outage): waiting {limit} s",
                why_excused="recovering",
            )
        self._peers_fine_since = None
        if stalled and not failing and now - self._answering_since >= limit:
            return Judgement(f"{seen}, while the leases and workers tables answer")
        return Judgement(
            excused=f"{seen}; no worker on any other instance is fine either: the fleet shares the failure",
            why_excused="fleet",
        )

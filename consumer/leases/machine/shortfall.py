"""Ready shards nobody may take because every worker is at ``max_leases_for_worker``: when that is
worth telling an operator, and what to tell them.

A fleet starting is not short of anything: its first workers fill their cap while the rest of the
ready shards wait for workers that are still booting. So the shortfall counts (the
``ReadyLeasesUnassigned`` gauge an alarm watches, and a WARN once a minute) only once the fleet had
time to join: it has lasted ``JOIN_GRACE_MILLIS`` (at least three full-scan intervals) with no
worker joining or leaving, and at least the group's minimum of workers run -- or it has lasted five
times that, whatever joined. The advice is ``consumer plan``'s (:mod:`consumer.leases.advice`).
"""

from __future__ import annotations

from consumer.leases.decisions import RoundPlan, Timing, live_workers
from consumer.leases.machine.actions import Now, Outbox
from consumer.leases.model import Snapshot
from ground.settings import WorkerSettings

LOG_EVERY_MILLIS = 60_000
JOIN_GRACE_MILLIS = 60_000


class Shortfall:
    def __init__(
        self,
        me: str,
        *,
        settings: WorkerSettings,
        timing: Timing,
        out: Outbox,
        advice: str | None,
        expected_workers: int,
        now_mono: int,
    ) -> None:
        self._me = me
        self._settings = settings
        self._timing = timing
        self._out = out
        self._advice = (
            advice or "Raise it or run more workers (fleet.max_instances); `consumer plan` suggests values."
        )
        self._expected = expected_workers
        self._since: int | None = None
        self._fleet: frozenset[str] = frozenset()
        self._fleet_since = now_mono
        self._logged_at: int | None = None

    def observe(self, plan: RoundPlan, snapshot: Snapshot, at: Now) -> int:
        """The ready shards left over by this round, counted once the fleet had time to join, else 0."""
        now = at.mono
        fleet = live_workers(snapshot, at.wall, self._timing) | {self._me}
        if fleet != self._fleet:
            self._fleet, self._fleet_since = fleet, now
        if not plan.unassigned_ready:
            self._since = None
            return 0
        if self._since is None:
            self._since = now
        grace = max(JOIN_GRACE_MILLIS, 3 * self._settings.full_scan_interval_millis)
        settled = now - max(self._since, self._fleet_since) >= grace
        joined = settled and len(fleet) >= self._expected
        return plan.unassigned_ready if joined or now - self._since >= 5 * grace else 0

    def warn(self, plan: RoundPlan, now: int) -> None:
        """Say so, once a minute, with the advice (``now``: monotonic ms)."""
        if self._logged_at is not None and now - self._logged_at < LOG_EVERY_MILLIS:
            return
        self._logged_at = now
        self._out.warning(
            "%d ready shards are left unprocessed: all %d workers hold worker.max_leases_for_worker=%d "
            "leases. %s",
            plan.unassigned_ready,
            plan.workers,
            self._settings.max_leases_for_worker,
            self._advice,
        )

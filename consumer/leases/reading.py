"""What a taker round reads: the workers table always, the leases table only for a reason.

A full scan of the leases table costs reads in proportion to the table (about 375 read units and
0.3 s of CPU for 10 000 leases); the workers table costs a unit or two. :class:`RoundReader` keeps
what decides between them — when the last full scan was made, who was alive then, what the last plan
left to do — and asks :func:`~consumer.leases.decisions.full_scan_reason`. Kept apart from the taker
(which acts on what is read) so that the policy, and its state, are in one place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from consumer.leases.decisions import RoundPlan, Timing, full_scan_reason, live_workers
from consumer.leases.model import Snapshot
from consumer.leases.store import LeaseStore
from consumer.telemetry.metrics import Metrics
from ground.clock import Clock
from ground.settings import WorkerSettings

log = logging.getLogger("consumer.leases")


@dataclass
class RoundReader:
    store: LeaseStore
    me: str
    settings: WorkerSettings
    timing: Timing
    clock: Clock
    metrics: Metrics
    full_at: int | None = None  # when the last full scan was read (monotonic ms)
    live_at_full: frozenset[str] = field(default_factory=frozenset)  # live workers that scan showed
    held_after_plan: int = 0  # unfinished leases held right after the last plan was carried out
    handing: bool = False  # another live worker's row says it is stopping (the taker waits less)

    def read(
        self, latest: Snapshot, held: int, last_plan: RoundPlan, awaiting: bool = False
    ) -> tuple[Snapshot, bool]:
        """This round's view and whether it is a full scan. ``latest``: the view of the last round
        (its leases stand in for the table's on a round without a full scan); ``held``: unfinished
        leases held now; ``awaiting``: a hand-over this worker asked for is on its way. A full scan
        reads both tables."""
        now = self.clock.monotonic_millis()
        since = None if self.full_at is None else now - self.full_at

        def reason(live_now: frozenset[str], stopping: bool = False) -> str | None:
            return full_scan_reason(
                since_full_millis=since,
                full_scan_interval_millis=self.settings.full_scan_interval_millis,
                live_now=live_now,
                live_at_full=self.live_at_full,
                held_active=held,
                held_after_plan=self.held_after_plan,
                last_plan=last_plan,
                others_stopping=stopping,
                awaiting=awaiting,
            )

        why = reason(self.live_at_full)
        if why is None:
            workers = self.store.scan_workers()
            live = live_workers(workers, self.clock.wall_millis(), self.timing) | {self.me}
            self.handing = self._stopping(workers, live)
            why = reason(live, self.handing)
            if why is None:
                self.metrics.count("TakeLeases", "WorkerTableScans", 1)
                # Leases as the last full scan saw them (what successor() counts and is_shard_finished
                # reads: a finished lease stays finished), heartbeats as they are now.
                view = Snapshot(
                    latest.leases, workers.heartbeats, latest.malformed, workers.first_start_claimed
                )
                return view, False
        snapshot = self.store.scan()
        self.full_at = self.clock.monotonic_millis()
        self.live_at_full = live_workers(snapshot, self.clock.wall_millis(), self.timing) | {self.me}
        self.handing = self._stopping(snapshot, self.live_at_full)
        self.metrics.count("TakeLeases", "FullScans", 1)
        log.debug("worker %s: full scan (%s)", self.me, why)
        return snapshot, True

    def _stopping(self, view: Snapshot, live: frozenset[str]) -> bool:
        return any(beat.stopping for w, beat in view.heartbeats.items() if w in live and w != self.me)

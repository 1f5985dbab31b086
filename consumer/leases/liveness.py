"""Liveness: this worker's heartbeat row, and the fence that stops it when heartbeats fail.

Every ``renewal_interval`` the worker puts its heartbeat row in the workers table, conditional on
the counter it last wrote. Another worker may take this worker's leases only once that row's
``heartbeatAt`` is older than ``failover + skew`` on its own clock *as read consistently just before
the take*; this worker stops using them at ``fence_after = failover - margin`` after the *start* of
its last heartbeat that succeeded (:class:`~consumer.leases.holdings.Holdings`). So a worker that
cannot renew — paused, partitioned, throttled, suspended — has stopped ``margin`` before anybody can
start, whatever the clocks say within the skew bound.

Writes that committed and still failed (an HTTP 500 or a timeout after the commit, which botocore
retries) are resolved by looking at the row the failed condition returns (``ALL_OLD``, no extra read):

- the row holds exactly the beat I sent (counter and time): my write landed — a success;
- the row holds another counter: it is still my row (nobody else writes its counter), written by an
  earlier attempt I believed failed — resynchronise to it and put again at once;
- there is no row: another worker found it dead for ten failover periods and removed it — whatever I
  held may be taken, so drop it all and start a new row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from consumer.leases.errors import HeartbeatConflictError, LeaseError
from consumer.leases.holdings import Holdings
from consumer.leases.model import HandOverRequest, Heartbeat
from consumer.leases.store import LeaseStore
from consumer.telemetry.metrics import Metrics
from ground.clock import Clock

log = logging.getLogger("consumer.leases")


@dataclass(frozen=True)
class BeatResult:
    ok: bool
    requests: tuple[HandOverRequest, ...] = ()
    dropped: tuple[str, ...] = ()  # leases the fence or a removed row took away, to announce as lost
    why: str = ""


class Liveness:
    def __init__(
        self,
        *,
        store: LeaseStore,
        worker_id: str,
        holdings: Holdings,
        clock: Clock,
        metrics: Metrics,
        renewal_interval_millis: int,
        stale_request_millis: int,
    ) -> None:
        self._store = store
        self._me = worker_id
        self._holdings = holdings
        self._clock = clock
        self._metrics = metrics
        self._interval = renewal_interval_millis
        self.counter: int | None = None  # the counter my row holds, as far as I know
        self._on_row: tuple[HandOverRequest, ...] = ()  # hand-over requests my row held last time
        self._stale_after = stale_request_millis
        self.stopping = False  # set by a graceful stop: every beat from then on says so on the row
        # When this worker last left leases free for others (Heartbeat.new_leases_at), carried on
        # every beat from then on: a reader compares it with what its last full scan saw.
        self.new_leases_at = 0
        # My last lease-taking round whose reads succeeded (wall ms), written on my row with every
        # beat: the instances' watchdogs count me as fine by it (deploy/watchdog.py).
        self.round_ok_at: int | None = None

    def round_observed(self, ok: bool | None) -> None:
        """The taker's round observer: a round whose reads succeeded is said on my next beat."""
        if ok:
            self.round_ok_at = self._clock.wall_millis()

    def next_wait_millis(self, last_ok: bool) -> int:
        """After a failed heartbeat, retry after a third of the interval: one throttled request must
        not cost the worker its leases (settings validation leaves room for that retry)."""
        return self._interval if last_ok else max(self._interval // 3, 1)

    def beat(self) -> BeatResult:
        started = self._clock.monotonic_millis()
        result = self._attempt(started, resync_left=1)
        elapsed = self._clock.monotonic_millis() - started
        self._metrics.timing("RenewAllLeases", "RenewLease", elapsed, result.ok)
        if result.ok:
            self._metrics.gauge("RenewAllLeases", "CurrentLeases", self._holdings.count(), "Count")
        elif result.why:
            log.warning("worker %s: heartbeat failed: %s", self._me, result.why)
        return result

    def _settled(self, now_wall: int) -> list[str]:
        """Requests on my row I no longer need to see: for leases I do not hold (handed over, lost,
        finished), or older than failover + skew (the thief has taken it by force, or given up)."""
        return [
            r.shard_id
            for r in self._on_row
            if not self._holdings.holds(r.shard_id) or now_wall - r.at_wall_millis > self._stale_after
        ]

    def _attempt(self, started: int, resync_left: int) -> BeatResult:
        expected = self.counter
        now_wall = self._clock.wall_millis()
        beat = Heartbeat(
            self._me,
            (expected or 0) + 1,
            now_wall,
            self._holdings.count(),
            self.stopping,
            new_leases_at=self.new_leases_at,
            round_ok_at_wall_millis=self.round_ok_at,
        )
        try:
            requests = self._store.heartbeat(beat, expected, self._settled(now_wall))
        except HeartbeatConflictError as exc:
            row = exc.current
            if row is not None and row.counter == beat.counter and row.at_wall_millis == beat.at_wall_millis:
                # My own write landed and was retried: the row it left says everything the lost
                # answer would have, requests included (they stay on the row until I clear them).
                return self._succeeded(started, beat, exc.requests)
            dropped: tuple[str, ...] = ()
            if row is None:
                dropped = tuple(self._holdings.drop_all())
                if dropped:
                    log.error("worker %s: heartbeat row was removed; dropping all leases", self._me)
            self.counter = row.counter if row is not None else None
            if resync_left:
                retried = self._attempt(started, resync_left - 1)
                return BeatResult(retried.ok, retried.requests, dropped + retried.dropped, retried.why)
            return BeatResult(False, (), dropped, f"row out of step ({exc})")
        except LeaseError as exc:
            # Throttled, unreachable or timed out: it may still have landed; the next put resolves it.
            return BeatResult(False, (), (), str(exc))
        return self._succeeded(started, beat, requests)

    def _succeeded(self, started: int, beat: Heartbeat, requests: tuple[HandOverRequest, ...]) -> BeatResult:
        self.counter = beat.counter
        self._on_row = requests
        dropped = self._holdings.renewed(started, self._clock.monotonic_millis())
        if dropped:
            log.warning(
                "worker %s: heartbeat landed after the fence deadline; %d leases were dropped at the "
                "deadline and are re-adopted only by a take that moves their counter",
                self._me,
                len(dropped),
            )
        return BeatResult(True, requests, tuple(dropped))

    def retire(self) -> None:
        """Remove my row on a graceful stop (conditional: only if still at my counter)."""
        if self.counter is None:
            return
        try:
            self._store.delete_heartbeat(Heartbeat(self._me, self.counter, 0))
        except LeaseError as exc:
            log.info("worker %s: heartbeat row not removed (%s); others retire it later", self._me, exc)

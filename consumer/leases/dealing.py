"""The view a gracefully stopping worker deals its leases from (decisions.successor).

A worker's latest view is its last round's: its leases as the last full scan saw them, which can be
a full-scan interval old (twice the failover time), and heartbeats as of its last round. When a
whole group stops at once (a deploy deletes the old group, every old worker gets SIGTERM in the
same second), each stopper dealt from its own old view: survivors that had since taken their share
still looked empty, the other stoppers did not look stopping yet, and every stopper handed its
leases to the same few survivors. Those adopted them one by one and shed the surplus at once: the
rolling-deploy bench's shards paused twice in a row (3.9 s, two taker intervals).

So a stopper reads the tables again before it deals: the leases table once, at its first hand-over
(every stopper does it within a moment of the others, so they deal from nearly the same rows), and
the workers table again at most every ``refresh_millis`` (the other stoppers' rows say "stopping"
a beat after their SIGTERM). The leases stay as first read: the stopper's own hand-overs must not
change its deal halfway (each lease is dealt where the same deal put it). One full scan per stop,
the cost of one ordinary round.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace

from consumer.leases.errors import LeaseError
from consumer.leases.model import Snapshot
from consumer.leases.store import LeaseStore
from ground.clock import Clock

log = logging.getLogger("consumer.leases")


@dataclass
class DealingView:
    store: LeaseStore
    clock: Clock
    refresh_millis: int  # the workers table is read again at most this often
    _view: Snapshot | None = None
    _tried_at: int | None = None  # monotonic ms of the last read (or failed read)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self, fallback: Snapshot) -> Snapshot:
        """The view to deal from now; ``fallback`` (the taker's latest) while the tables refuse.
        Called from every shard consumer's release thread at once: one read at a time."""
        with self._lock:
            now = self.clock.monotonic_millis()
            if self._tried_at is not None and now - self._tried_at < self.refresh_millis:
                # Read a moment ago (or refused a moment ago: not again for every lease).
                return self._view if self._view is not None else fallback
            self._tried_at = now
            try:
                if self._view is None:
                    self._view = self.store.scan()
                else:
                    workers = self.store.scan_workers()
                    self._view = replace(self._view, heartbeats=workers.heartbeats)
            except LeaseError as exc:
                log.info("dealing from the last round's view: the tables refused a fresh read (%s)", exc)
            return self._view if self._view is not None else fallback

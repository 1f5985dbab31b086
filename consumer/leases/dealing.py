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

A stopper may still deal before another stopper's row says so (its beat lands a moment after its
SIGTERM). That worker never adopts what it is handed, and once its row is gone the lease waits for
the KCL expiry rule (a failover time). So the stopper remembers each hand-over, and as its last step
(:meth:`DealingView.redeal`) reads the workers table again and hands each lease whose survivor
turned out to be stopping on to another, conditional on the counter its hand-over left.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from consumer.leases.decisions import Timing, live_workers, successor
from consumer.leases.errors import LeaseError
from consumer.leases.model import Lease, Snapshot
from consumer.leases.store import LeaseStore
from ground.clock import Clock
from ground.threads import Lock

log = logging.getLogger("consumer.leases")


@dataclass
class DealingView:
    store: LeaseStore
    clock: Clock
    refresh_millis: int  # the workers table is read again at most this often
    # Held across the read, so the shard consumers releasing at once deal from one read; from the
    # worker's Threads (ground.threads), so that a simulation's thread waiting on it yields.
    lock: Lock
    _view: Snapshot | None = None
    _tried_at: int | None = None  # monotonic ms of the last read (or failed read)
    _handed: dict[str, Lease] = field(default_factory=dict)  # each lease as my hand-over left it

    def handed(self, released: Lease) -> None:
        """A lease this stopper handed to a named survivor, as the hand-over wrote it."""
        with self.lock:
            self._handed[released.shard_id] = released

    def handed_leases(self) -> list[Lease]:
        with self.lock:
            return list(self._handed.values())

    def refresh(self, fallback: Snapshot) -> Snapshot:
        """The view with the workers table read now, whenever it was last read."""
        with self.lock:
            self._tried_at = None
        return self.current(fallback)

    def current(self, fallback: Snapshot) -> Snapshot:
        """The view to deal from now; ``fallback`` (the taker's latest) while the tables refuse.
        Called from every shard consumer's release thread at once: one read at a time."""
        with self.lock:
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

    def redeal(self, me: str, fallback: Snapshot, timing: Timing, *, max_leases_for_worker: int) -> None:
        """A graceful stop's last step, before my row goes: a lease I handed to a worker that turned
        out to be stopping too (its row did not say so yet when I dealt) is never adopted by it, and
        would wait a failover time once its row is gone. Hand it on again, conditional on the owner
        and counter my hand-over left: it lands only if that worker did not adopt it meanwhile
        (adopting moves the counter), so no shard is ever processed under two owners."""
        view = self.refresh(fallback)
        now = self.clock.wall_millis()
        live = live_workers(view, now, timing)
        for released in self.handed_leases():
            to = released.owner
            if to is None or (to in live and not view.heartbeats[to].stopping):
                continue
            again = successor(
                me, view, now, timing, shard_id=released.shard_id, max_leases_for_worker=max_leases_for_worker
            )
            if again is None or again == to:
                continue
            try:
                self.store.release(released, again)
            except LeaseError as exc:
                log.info("worker %s: %s stays with %s (%s)", me, released.shard_id, to, exc)
                continue
            log.info("worker %s handed %s on from %s, stopping too, to %s", me, released.shard_id, to, again)

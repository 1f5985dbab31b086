"""The view a gracefully stopping worker deals its leases from (successors.successor).

A worker's latest view is its last round's: its leases as the last full scan saw them, which can be
a full-scan interval old (twice the failover time), and heartbeats as of its last round. When a
whole group stops at once (a deploy deletes the old group, every old worker gets SIGTERM in the
same second), a stopper dealing from its own old view sees survivors that have since taken their
share as empty and the other stoppers as not stopping yet, and every stopper hands its leases to
the same few survivors, which adopt them one by one and shed the surplus at once: those shards
pause twice in a row.

So a stopper reads the tables again before it deals: the leases table once, at its first hand-over
(every stopper does it within a moment of the others, so they deal from nearly the same rows), and
the workers table again at most every ``refresh_millis`` (the other stoppers' rows say "stopping"
a beat after their SIGTERM). The leases stay as first read: the stopper's own hand-overs must not
change its deal halfway (each lease is dealt where the same deal put it). One full scan per stop,
the cost of one ordinary round. The shard consumers releasing at once deal from one read: the
driver makes these reads one at a time (:class:`~.actions.DealingView`).

A stopper may still deal before another stopper's row says so (its beat lands a moment after its
SIGTERM). That worker never adopts what it is handed, and once its row is gone the lease waits for
the KCL expiry rule (a failover time). So the stopper remembers each hand-over, and as its last step
(:func:`consumer.leases.machine.letting_go.redeal`) reads the workers table again and hands each
lease whose survivor turned out to be stopping on to another, conditional on the counter its
hand-over left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from consumer.leases.errors import LeaseError
from consumer.leases.machine.actions import Conversation, Now, Outbox, Scan, ScanWorkers, ask
from consumer.leases.model import Lease, Snapshot


@dataclass
class Dealing:
    refresh_millis: int  # the workers table is read again at most this often
    now: Callable[[], Now]  # the time of the machine's step in progress
    out: Outbox
    view: Snapshot | None = None
    tried_at: int | None = None  # monotonic ms of the last read (or failed read)
    handed: dict[str, Lease] = field(default_factory=dict)  # each lease as my hand-over left it

    def read(self, fallback: Snapshot, *, refresh: bool = False) -> Conversation[Snapshot]:
        """The view to deal from now (with ``refresh``, the workers table read now, whenever it was
        last read); ``fallback`` (the round's latest) while the tables refuse."""
        if refresh:
            self.tried_at = None
        now = self.now().mono
        if self.tried_at is not None and now - self.tried_at < self.refresh_millis:
            # Read a moment ago (or refused a moment ago: not again for every lease).
            return self.view if self.view is not None else fallback
        self.tried_at = now
        try:
            if self.view is None:
                self.view = yield from ask(Scan())
            else:
                workers = yield from ask(ScanWorkers())
                self.view = replace(self.view, heartbeats=workers.heartbeats)
        except LeaseError as exc:
            self.out.info("dealing from the last round's view: the tables refused a fresh read (%s)", exc)
        return self.view if self.view is not None else fallback

"""What a taker round reads: the workers table always, the leases table only for a reason.

A full scan of the leases table costs reads in proportion to the table (about 375 read units for
10 000 leases, and the CPU to parse every item); the workers table costs a unit or two. :class:`RoundReader` keeps
what decides between them — when the last full scan was made, who was alive then, what the last plan
left to do — and asks :func:`full_scan_reason`. Kept apart from the round (:mod:`.taking`, which acts
on what is read) so that the policy, and its state, are in one place. A part of the lease machine:
it makes its reads as requests (:mod:`.actions`), and reads the time of the machine's step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from consumer.leases.decisions import RoundPlan, Timing, live_workers
from consumer.leases.machine.actions import Conversation, Now, Outbox, Scan, ScanWorkers, ask
from consumer.leases.model import Snapshot
from ground.settings import WorkerSettings


def full_scan_reason(
    *,
    since_full_millis: int | None,
    full_scan_interval_millis: int,
    live_now: frozenset[str],
    live_at_full: frozenset[str],
    held_active: int,
    held_after_plan: int,
    last_plan: RoundPlan,
    others_stopping: bool = False,
    awaiting: bool = False,
    new_leases: bool = False,
) -> str | None:
    """Why this round must scan the whole leases table, or None when the workers table is enough.

    A full scan costs reads in proportion to the table (about 375 read units for 10 000 leases);
    the workers table costs a unit or two. Only a full scan shows what there is to take, so one is
    made when something may have changed for this worker:

    * ``first``: none made yet;
    * ``interval``: ``full_scan_interval_millis`` passed (new leases from shard sync, a lease
      released free, a Java KCL owner expiring: what no heartbeat row announces);
    * ``workers``: the set of live workers changed — one died (its leases are to be taken within
      the failover time), joined (balance), or stopped and handed its leases on (adopt them);
    * ``handing``: another live worker is stopping gracefully (its heartbeat row says so): it is
      about to hand its leases on, and the ones handed here are adopted at the next round;
    * ``awaiting``: this worker asked for a hand-over that has not come yet: its owner hands it
      over after the batch in flight, and it is adopted at the next round;
    * ``new leases``: leases were left free since the last full scan -- this worker created a
      shard's children, or another worker's row says it left some free (``Heartbeat.new_leases_at``):
      a child waits for no interval before somebody with room takes it;
    * ``wanting``: the last plan had work (takes, steals, sheds, hand-overs, expired leases) or left
      this worker short of its share, or this worker holds fewer leases than when the plan was
      carried out (one finished, was handed over or lost), or fewer than the scan named it owner
      of (one to adopt): keep scanning every round until settled.

    ``held_active``: unfinished leases held now; ``held_after_plan``: right after the last plan was
    carried out; ``live_at_full``: live workers at the last full scan.
    """
    if since_full_millis is None:
        return "first"
    if since_full_millis >= full_scan_interval_millis:
        return "interval"
    if live_now != live_at_full:
        return "workers"
    if others_stopping:
        return "handing"
    if awaiting:
        return "awaiting"
    if new_leases:
        return "new leases"
    plan = last_plan
    if plan.take or plan.steal or plan.shed or plan.hand_over or plan.expired or plan.short:
        return "wanting"
    if held_active < held_after_plan or held_after_plan < plan.mine:
        return "wanting"  # one went since, or the table names me owner of one I do not hold (adopt)
    return None


@dataclass
class RoundReader:
    me: str
    settings: WorkerSettings
    timing: Timing
    now: Callable[[], Now]  # the time of the machine's step in progress
    out: Outbox
    full_at: int | None = None  # when the last full scan was read (monotonic ms)
    live_at_full: frozenset[str] = field(default_factory=frozenset)  # live workers that scan showed
    held_after_plan: int = 0  # unfinished leases held right after the last plan was carried out
    handing: bool = False  # another live worker's row says it is stopping (the taker waits less)
    # Each other worker's Heartbeat.new_leases_at as answered by a full scan; a row showing another
    # value means that worker left leases free since (full_scan_reason). Kept per worker: each stamps
    # its announcements with its own clock, so one worker's stamp says nothing about another's.
    new_leases_seen: dict[str, int] = field(default_factory=dict)
    # Leases this worker created, as a running count (shard sync bumps it through the machine), and the
    # count when the last full scan was sent: a difference means one may not have been scanned yet.
    created: int = 0
    created_at_full: int = 0

    def read(
        self, latest: Snapshot, held: int, last_plan: RoundPlan, awaiting: bool = False
    ) -> Conversation[tuple[Snapshot, bool]]:
        """This round's view and whether it is a full scan. ``latest``: the view of the last round
        (its leases stand in for the table's on a round without a full scan); ``held``: unfinished
        leases held now; ``awaiting``: a hand-over this worker asked for is on its way. A full scan
        reads both tables."""
        now = self.now().mono
        since = None if self.full_at is None else now - self.full_at

        def reason(live_now: frozenset[str], stopping: bool = False, new_leases: bool = False) -> str | None:
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
                new_leases=new_leases or self.created != self.created_at_full,
            )

        why = reason(self.live_at_full)
        announced = None  # the announcements read before the leases are scanned, if any
        if why is None:
            workers = yield from ask(ScanWorkers())
            live = live_workers(workers, self.now().wall, self.timing) | {self.me}
            self.handing = self._stopping(workers, live)
            announced = self._announcements(workers)
            why = reason(live, self.handing, self._unanswered(announced))
            if why is None:
                self.out.count("TakeLeases", "WorkerTableScans", 1)
                # Leases as the last full scan saw them (what successor() counts and waiting_parents
                # reads: a finished lease stays finished), heartbeats as they are now.
                view = Snapshot(
                    latest.leases, workers.heartbeats, latest.malformed, workers.first_start_claimed
                )
                return view, False
        created = self.created  # read before the scan: a lease created while it runs is scanned for again
        snapshot = yield from ask(Scan())
        self.created_at_full = created
        self.full_at = self.now().mono
        # Only an announcement read before this scan began is answered by it: the scan reads the
        # leases first and the rows after, so a row read now may announce a lease created after the
        # leases were read (it is scanned for at the next round instead of at the full-scan interval).
        if announced is not None:
            self.new_leases_seen.update(announced)
        self.live_at_full = live_workers(snapshot, self.now().wall, self.timing) | {self.me}
        self.handing = self._stopping(snapshot, self.live_at_full)
        self.out.count("TakeLeases", "FullScans", 1)
        self.out.say(logging.DEBUG, "worker %s: full scan (%s)", self.me, why)
        return snapshot, True

    def _announcements(self, view: Snapshot) -> dict[str, int]:
        """When each other worker last said it left leases free, by its own clock (0: never)."""
        return {w: b.new_leases_at for w, b in view.heartbeats.items() if w != self.me}

    def _unanswered(self, announced: dict[str, int]) -> bool:
        """Another worker announced leases left free that no full scan of mine has answered."""
        return any(at and at != self.new_leases_seen.get(w) for w, at in announced.items())

    def _stopping(self, view: Snapshot, live: frozenset[str]) -> bool:
        return any(beat.stopping for w, beat in view.heartbeats.items() if w in live and w != self.me)

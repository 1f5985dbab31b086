"""What the lease machine knows, in one place, and the judgements its operations share.

:class:`LeaseState` is every piece of the lease side's state: the held leases and the fence
(:class:`~.holdings.Holdings`), the heartbeat row (:class:`Row`), the last view of the tables and what
the next round must read (:class:`~.reading.RoundReader`), the taker's memory (hand-overs asked for,
leases taken lately, created, avoided), a stopper's dealing view, and the time of the step in
progress. The operations (:mod:`.beating`, :mod:`.taking`, :mod:`.executing`, :mod:`.letting_go`,
:mod:`.checkpoints`) are functions over it; :class:`~.machine.LeaseMachine` is their one face.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from consumer.leases.decisions import KclExpiryTracker, RoundPlan, Timing
from consumer.leases.machine.actions import Now, Outbox
from consumer.leases.machine.dealing import Dealing
from consumer.leases.machine.holdings import Holdings
from consumer.leases.machine.not_taken import NotTaken
from consumer.leases.machine.reading import RoundReader
from consumer.leases.machine.shortfall import Shortfall
from consumer.leases.model import HandOverRequest, Lease, Snapshot
from ground.settings import WorkerSettings


@dataclass
class Row:
    """My heartbeat row, as far as I know it."""

    interval_millis: int  # renewal_interval: how often it is written
    stale_request_millis: int  # a hand-over request older than this is settled (failover + skew)
    counter: int | None = None  # the counter my row holds
    on_row: tuple[HandOverRequest, ...] = ()  # the hand-over requests my row held last time
    stopping: bool = False  # a graceful stop: every beat from then on says so on the row
    # When this worker last left leases free for others (Heartbeat.new_leases_at), carried on every
    # beat from then on: a reader compares it with what its last full scan saw.
    new_leases_at: int = 0
    # My last lease-taking round whose reads succeeded (wall ms), written on my row with every beat:
    # the instances' watchdogs count me as fine by it (deploy/watchdog.py).
    round_ok_at: int | None = None
    failing: bool = False  # the last heartbeat failed

    def next_wait_millis(self, last_ok: bool) -> int:
        """After a failed heartbeat, retry after a third of the interval: one throttled request must
        not cost the worker its leases (settings validation leaves room for that retry)."""
        return self.interval_millis if last_ok else max(self.interval_millis // 3, 1)


@dataclass
class LeaseState:
    me: str
    settings: WorkerSettings
    timing: Timing
    rng: random.Random
    now: Now
    out: Outbox
    holdings: Holdings
    row: Row
    reader: RoundReader
    dealing: Dealing
    not_taken: NotTaken
    shortfall: Shortfall
    kcl: KclExpiryTracker
    expected_workers: int = 1
    latest: Snapshot = field(default_factory=lambda: Snapshot({}, {}))
    last_plan: RoundPlan = field(default_factory=RoundPlan)
    failures: int = 0  # consecutive failed rounds
    taking: bool = True
    asked: dict[str, int] = field(default_factory=dict)  # hand-overs I asked for, and when (mono ms)
    taken_at: dict[str, int] = field(default_factory=dict)  # leases I took up lately, and when (mono)
    # When my present ownership of each lease I hold began (wall ms): a hand-over request made before
    # that is about an earlier ownership (asked_before_mine).
    held_since_wall: dict[str, int] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)  # created here, not shown by a full scan of mine yet
    ended_parents: set[str] = field(default_factory=set)  # their parents: ended, the view may lag
    avoid: dict[str, int] = field(default_factory=dict)  # given up as stalled here, until when (mono)
    # Shards given up as stalled whose call here has not returned, as the stall mover counted them at
    # the start of this round (LeaseMachine.take_round): avoided until their call returns.
    stuck: frozenset[str] = frozenset()
    children_of: tuple[Snapshot | None, frozenset[str]] = (None, frozenset())  # (scan, its parents)
    recovered_at: int | None = None  # wall time my own reads or heartbeats worked again
    view: tuple[str, ...] = ()  # the live workers, as fleet_position last saw them
    view_since: int = 0  # since when (mono ms)

    # -------------------------------------------------------------------------- the fence

    def fenced_now(self) -> bool:
        """Checked again just before each take: a round's reads can be slow, and a take sent while
        fenced moves a counter this worker cannot use, under a worker that may be taking it."""
        return self.holdings.fenced(self.now.mono)

    def expire(self) -> None:
        self.out.lost(
            self.holdings.expire(self.now.mono),
            "fenced: no heartbeat succeeded within failover - margin",
            self.me,
        )

    def hold(self, lease: Lease, how: str, sent_fence_at: int | None, since: int | None = None) -> bool:
        if not self.holdings.add(lease, self.now.mono, sent_fence_at, since):
            self.out.info(
                "worker %s: %s %s after its fence deadline; not using it", self.me, how, lease.shard_id
            )
            return False
        self.taken_at[lease.shard_id] = self.now.mono
        self.held_since_wall[lease.shard_id] = self.now.wall
        self.out.announce("taken", lease.shard_id, lease)
        return True

    def held_active(self) -> int:
        return sum(1 for lease in self.holdings.leases() if not lease.finished)

    # --------------------------------------------------------------------------- hand-over

    def stop_by(self, asked_at_wall: int) -> int:
        """When the owner of a lease asked for at ``asked_at_wall`` must stop using it (failover -
        margin later): the thief may force a take only at failover + skew (conditions.py)."""
        return asked_at_wall + self.settings.fence_after_millis

    def asked_before_mine(self, request: HandOverRequest) -> bool:
        """A request on my row made before my present ownership of its lease began, by more than
        the clock skew allowed: it was meant for an earlier ownership (mine before I handed the lease
        over and got it back, or another's), and is not honoured, only cleared. Honouring it would
        hand a lease straight back to a worker that has since given it up, and two workers that
        asked each other would pass it to and fro. Ignoring it is safe: a forced take needs the
        lease's own pending mark, which my take removed; a thief that still wants the lease asks
        again, and that request is newer than my ownership."""
        since = self.held_since_wall.get(request.shard_id)
        if since is None or not self.holdings.holds(request.shard_id):
            return False
        return request.at_wall_millis < since - self.settings.max_clock_skew_millis

    def hand_over_asked(self, shard_id: str, thief: str | None) -> None:
        """A thief's request for a lease I hold became known (on my heartbeat row, or as the lease's
        pending owner in a scan, whichever came first): say so, and wake the shard's consumer (the
        ``asked`` announcement), which hands the lease over after its batch in flight."""
        self.out.info(
            "worker %s: %s asks for %s; handing it over after the batch in flight", self.me, thief, shard_id
        )
        self.out.announce("asked", shard_id, None)

    def hand_over_overdue(self, shard_id: str) -> bool:
        """A thief asked for this lease longer than failover - margin ago (by my clock): stop."""
        deadline = self.holdings.hand_over_deadline(shard_id)
        return deadline is not None and self.now.wall > deadline

    def awaiting_hand_over(self) -> bool:
        """A lease I asked for may be handed to me now: scan every round until it is mine, or until
        failover + skew passed (its owner is forced out then). The owner hands it over after its
        batch in flight, and a round without a full scan would not see it until the full-scan
        interval."""
        horizon = self.timing.horizon_millis
        now = self.now.mono
        self.asked = {
            shard: at
            for shard, at in self.asked.items()
            if now - at <= horizon and not self.holdings.holds(shard)
        }
        return bool(self.asked)

    # ------------------------------------------------------------------------------ taking

    def wait_millis(self) -> int:
        """The pause before the next round. Half the taking interval: a round without a full scan is
        one small read of the workers table, so looking twice per interval costs little and brings a
        dead worker's leases, and a stopping worker's hand-overs, back within the interval rather
        than up to a whole one after it. While another worker is stopping gracefully, or a hand-over
        this worker asked for is on its way, a quarter: the lease is handed over once the owner's
        batch in flight is done, and adopted at the next round, so half an interval would add most
        of one to a shard's pause in a rolling deploy. After a failed read, one whole interval: a
        throttled or unreachable table is asked half as often, and the back-off never outgrows one
        interval, so whenever an outage ends the leases are taken up within one taking interval (the
        heartbeat's first success after an outage also wakes the taker at once)."""
        interval = self.settings.taker_interval_millis
        if self.failures == 0:
            soon = self.reader.handing or self.awaiting_hand_over()
            return max(interval // (4 if soon else 2), 1)
        return max(interval, 1)

    def recently_taken(self) -> frozenset[str]:
        """Leases taken or handed to me within the last two taking intervals: a shed gives others up
        first, so that a shard just moved here does not move again at once (and pause twice)."""
        now = self.now.mono
        window = 2 * self.settings.taker_interval_millis
        self.taken_at = {s: at for s, at in self.taken_at.items() if now - at < window}
        return frozenset(self.taken_at)

    def avoiding(self) -> frozenset[str]:
        """Shards given up as stalled here: for a stall timeout, and while their call is stuck."""
        now = self.now.mono
        self.avoid = {s: until for s, until in self.avoid.items() if now < until}
        return frozenset(self.avoid) | self.stuck

    def left_free(self) -> None:
        """This worker left leases free for others: its row says so at once (Heartbeat.new_leases_at),
        so every worker with room scans for them at its next round."""
        self.row.new_leases_at = self.now.wall
        self.out.wake("heartbeat")

    def note_recovery(self) -> None:
        """My reads or my heartbeat work again after failing: the tables were out for me too."""
        self.recovered_at = self.now.wall

    def forgiving(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with no heartbeat older than the end of my own outage, for failover + skew
        after it. A row that went stale while the tables refused me as well says nothing about its
        worker: the outage was everyone's (a DynamoDB brownout), and the first worker back would
        otherwise take every other worker's leases before they could beat once -- lease churn,
        replays and a slower resume. A worker that really died meanwhile is taken over failover +
        skew after the outage instead of at once."""
        recovered = self.recovered_at
        if recovered is None:
            return snapshot
        if self.now.wall - recovered > self.timing.horizon_millis:
            self.recovered_at = None
            return snapshot
        beats = {
            worker: replace(beat, at_wall_millis=max(beat.at_wall_millis, recovered))
            for worker, beat in snapshot.heartbeats.items()
        }
        return replace(snapshot, heartbeats=beats)

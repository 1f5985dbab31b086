"""Shard sync: keep the leases table in step with the stream's shards.

The decision is :func:`consumer.streams.sync.plan_shard_sync` (pure: listed shards + existing leases
in, leases to create and delete out; its docstring has the rules). :class:`ShardSyncer` performs it.
DescribeStream's eventual consistency only produces warnings (logged as the benign "parent not
closed" race); nothing fails the sync.

Listing a stream costs one DescribeStream call per 100 shards, from an account-wide budget of about
10 calls per second (consumer.streams.pacing), so the fleet spends it in two ways only:

- **One lister.** Every ``shard_sync_interval_millis`` only the fleet's sync leader (the live worker
  with the smallest id, :func:`consumer.leases.decisions.sync_leader`) lists the whole stream and
  syncs; the others skip the round. If the leader dies, its heartbeat expires and the next worker
  lists at its next round. At start-up too: a worker lists one taker interval after it registered,
  and only if it is the leader then, so a hundred workers restarting together list once, not a
  hundred times (with the fleet's DescribeStream budget, consumer.streams.pacing, the listing takes
  the leader's slots of the fleet's timetable). A listing that failed (a table or the stream
  refusing) is tried again a taker interval later, not an interval: after an outage it leases every
  shard that rolled over meanwhile in one pass (a call per 100 shards) within a taker interval of
  the dependency answering, where looking up each generation's children in turn, as each parent
  ends, spends a call per shard from the same budget.
- **Children at a shard's end, by its owner.** When one of this worker's shards ends, it asks
  DescribeStream for that shard's children only (``ShardFilter`` CHILD_SHARDS, one call) and creates
  their leases at TRIM_HORIZON, naming the parent. A listing that does not show the children yet is
  asked again a few times with growing waits; after that the leader's next listing finds them. A
  lookup refused for throttling is asked again without counting as one of those tries: throttling
  delays discovery, it does not drop it. Nor does a lookup that failed (the workers table, where the
  lineage generation lives, the leases table or the stream refusing or out of reach): it keeps its
  place and is asked again with growing waits of at most one taker interval, and while one fails
  the others due with it wait too (one failing call per pass, not one per ended shard). The leader's
  listing fails in such an outage as well; a failed listing is tried again a taker interval later
  rather than at its next interval (a minute by default). Together, the children of every shard
  that ended during an outage longer than the tries are leased within about a taker interval of
  the dependency answering.

The leases are read *before* the shards are listed. A worker paused between the two (SIGSTOP, a GC
pause, slow throttled calls) then holds an older view of the leases and a newer listing — never a
fresh leases table, whose finished parents are already cleaned up, beside an old listing that lacks
the descendants proving they are finished (which would re-create the parents' leases at TRIM_HORIZON
and replay them after their grandchildren).

A plan is only as good as the scan it came from, and a create sent late — the worker stopped
between planning and sending for any length of time (GC, SIGSTOP, a suspended VM), a slow call,
botocore's retries — could re-create a lease that was created, finished and cleaned up meanwhile,
and replay that shard after its children. No check the worker makes before sending can close that
gap (it can stop right after the check), so the table does: the sync reads the *lineage generation*
before its scan, and every create is conditional on it; every cleanup moves it before deleting
(:mod:`consumer.leases.conditions`). A create planned before a cleanup it could not see fails, and
the next sync plans again from a fresh view. A finished lease is deleted only once *this* worker has
seen it finished for ``worker.cleanup_delay_millis`` (three failover periods), longer than any scan
is stale, so no scan read after the generation can predate a lease that was created and cleaned up
before it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from consumer.leases.coordinator import LeaseEvent
from consumer.leases.errors import LeaseError, LineageChangedError
from consumer.leases.model import ExtendedSequenceNumber, Lease, Snapshot
from consumer.lifecycle.ports import SyncOps
from consumer.streams.errors import StreamSourceError, ThrottledError
from consumer.streams.source import Shard
from consumer.streams.sync import LeaseView, ShardSyncPlan, plan_shard_sync
from consumer.telemetry.catalogue import log_parent_not_closed
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.positions import LATEST, TRIM_HORIZON
from ground.settings import WorkerSettings
from ground.threads import SYSTEM_THREADS, Event, Threads

log = logging.getLogger("consumer.lifecycle")

THROTTLED = -1  # sync_children: the lookup was refused for throttling (ask again, not a try)
FAILED = -2  # sync_children: a table or the stream failed the lookup (ask again, not a try)
# Waits before asking again for the children of an ended shard that DescribeStream does not show yet
# (its view lags the shard's end by moments): short first, since a child waits on each; every try
# still waits for this worker's slot of the fleet's DescribeStream timetable.
CHILD_RETRY_MILLIS = (250, 500, 1_000, 2_000, 4_000, 8_000, 16_000)
# After the children showed, one more look this much later (a sibling of a split shown late).
CHILD_CONFIRM_MILLIS = 5_000


class ShardSyncer:
    def __init__(
        self,
        *,
        list_shards: Callable[[], Iterable[Shard]],
        coordinator: SyncOps,
        settings: WorkerSettings,
        clock: Clock,
        metrics: Metrics | None = None,
        list_children: Callable[[str], Iterable[Shard]] | None = None,
        threads: Threads = SYSTEM_THREADS,
    ) -> None:
        self._list_shards = list_shards
        self._list_children = list_children
        # ended shard -> (retries so far, next look at, children seen so far)
        self._ended: dict[str, tuple[int, int, int]] = {}
        self._ended_at: dict[str, int] = {}  # ended shard -> when this worker heard of its end
        self._lookups_failing = 0  # children lookups failed in a row (FAILED), across shards
        self._full_now = False  # without list_children, a shard's end asks for a whole listing
        self._lock = threading.Lock()
        self._coordinator = coordinator
        self._settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._wake = threads.event()
        self._children_wake = threads.event()
        self._finished_since: dict[str, int] = {}  # shard -> when I first saw its lease finished
        self.open_shards: int | None = None  # in the last whole listing
        self.listing_failed = False  # this worker's last whole sync failed (asked again sooner)

    def sync(self) -> ShardSyncPlan | None:
        started = self._clock.monotonic_millis()
        try:
            generation = self._coordinator.lineage_generation()  # before the scan: module docstring
            snapshot = self._coordinator.scan()  # before the listing: module docstring
            shards = tuple(self._list_shards())
            # N as the stream has it (one open shard per partition): the scaling alarms' 2N.
            self.open_shards = sum(1 for s in shards if s.is_open)
            self._metrics.gauge("ShardSyncTask", "OpenShards", self.open_shards, "Count")
            leases = snapshot.leases
            first_start = not leases and not snapshot.first_start_claimed
            # Exactly one worker may plan the first start at LATEST: two doing it from empty scans
            # across a rollover would lease the new child at LATEST and skip its first records. The
            # loser creates nothing this round; its next sync sees the winner's leases (or, if the
            # winner died first, an empty table with the marker: every shard at TRIM_HORIZON).
            if (
                first_start
                and self._settings.initial_position == LATEST
                and not self._coordinator.claim_first_start()
            ):
                log.info("shard sync: another worker is doing the first start; syncing next round")
                return None
            plan = plan_shard_sync(
                shards,
                [LeaseView.of(lease) for lease in leases.values()],
                initial_position=self._settings.initial_position,
                first_start=first_start,
                cleanup=self._settings.cleanup_leases_upon_shard_completion,
            )
            for warning in plan.warnings:
                if warning.kind == "parent_looks_open" and warning.parent_shard_id:
                    log_parent_not_closed(log, warning.shard_id, warning.parent_shard_id)
                else:
                    log.warning("shard sync: %s", warning.message)
            created = self._create(plan, generation)
            deleted = 0
            for shard_id in self._old_enough(snapshot, plan.leases_to_delete, started):
                try:
                    self._coordinator.delete_finished(leases[shard_id])
                    deleted += 1
                except LeaseError:
                    continue
        except (StreamSourceError, LeaseError) as exc:
            elapsed = self._clock.monotonic_millis() - started
            self.listing_failed = True
            log.warning("shard sync failed (retrying in a taker interval): %s", exc)
            self._metrics.timing("ShardSyncTask", "ShardSyncTask", elapsed, False)
            return None
        self.listing_failed = False
        if created or deleted:
            log.info("shard sync: %d leases created, %d finished leases removed", created, deleted)
        self._metrics.timing("ShardSyncTask", "ShardSyncTask", self._clock.monotonic_millis() - started, True)
        return plan

    def _create(self, plan: ShardSyncPlan, generation: int) -> int:
        created = 0
        for new in plan.leases_to_create:
            lease = Lease(
                new.shard_id,
                None,
                0,
                ExtendedSequenceNumber(new.checkpoint),
                parent_shard_ids=new.parent_shard_ids,
            )
            try:
                created += self._coordinator.create_leases([lease], generation)
            except LineageChangedError as exc:
                log.info("shard sync: %s", exc)
                break
        return created

    def _old_enough(self, snapshot: Snapshot, candidates: Sequence[str], scanned_at: int) -> list[str]:
        """The finished leases I have seen finished for long enough to delete (module docstring)."""
        finished = {shard_id for shard_id, lease in snapshot.leases.items() if lease.finished}
        self._finished_since = {
            shard_id: self._finished_since.get(shard_id, scanned_at) for shard_id in finished
        }
        delay = self._settings.cleanup_delay_millis
        return [s for s in candidates if scanned_at - self._finished_since.get(s, scanned_at) >= delay]

    def shard_ended(self, shard_id: str) -> None:
        """A shard of mine reached its end: its children are looked up now (module docstring), on the
        children thread, rather than at the leader's next listing. Told twice while its lookup is
        pending (the lease's ``finished`` event, then the shard consumer's end), it looks up once."""
        with self._lock:
            if shard_id in self._ended:
                return
            self._ended[shard_id] = (0, self._clock.monotonic_millis(), 0)
            self._ended_at.setdefault(shard_id, self._clock.monotonic_millis())
        log.info("shard %s ended; looking up its children", shard_id)
        self._children_wake.set()

    def lease_changed(self, event: LeaseEvent) -> None:
        """A lease listener: a SHARD_END of this worker's recorded. Usually its shard consumer reports
        the end as well (:meth:`shard_ended`); not when the answer to that checkpoint was lost and the
        lease dropped before it came (a fence, an overdue hand-over) and the position was found
        recorded, or recorded, later -- then this is the only word that the children are due."""
        if event.kind == "finished":
            self.shard_ended(event.shard_id)

    def sync_children_due(self) -> None:
        """Look up the children of every ended shard whose turn has come: first at once, then after
        each of CHILD_RETRY_MILLIS while DescribeStream does not show them yet, and once more
        CHILD_CONFIRM_MILLIS after they showed (a stale view could show one child of a split
        before the other) -- unless the look that found them went out that long after the end
        already (the worker waited for its DescribeStream slot): it is the confirming look."""
        now = self._clock.monotonic_millis()
        with self._lock:
            due = [
                (shard_id, tries, seen) for shard_id, (tries, at, seen) in self._ended.items() if at <= now
            ]
        # First looks before retries and confirming looks: each waits for this worker's next
        # DescribeStream slot, and a shard that just ended has no child leased at all yet.
        due.sort(key=lambda entry: entry[1] > 0 or entry[2] > 0)
        failing_until: int | None = None  # set once a lookup of this pass failed
        for shard_id, tries, seen in due:
            if failing_until is not None:
                # The dependency that failed that lookup would fail this one too: it waits as long.
                with self._lock:
                    if shard_id in self._ended:
                        self._ended[shard_id] = (tries, failing_until, seen)
                continue
            found = self.sync_children(shard_id)
            later = self._clock.monotonic_millis()
            with self._lock:
                settled = later - self._ended_at.get(shard_id, later) >= CHILD_CONFIRM_MILLIS
                if found == FAILED:
                    failing_until = later + self._failed_lookup_wait()
                    self._ended[shard_id] = (tries, failing_until, seen)
                    continue
                self._lookups_failing = 0
                if found == THROTTLED:
                    self._ended[shard_id] = (tries, later + CHILD_RETRY_MILLIS[0], seen)
                elif found is None or (found and (seen or settled)):
                    # Nothing more to do, or confirmed: by a second look, or by a first one that
                    # went out CHILD_CONFIRM_MILLIS after the end (its slot came late), which sees
                    # what the confirming look would.
                    self._ended.pop(shard_id, None)
                    self._ended_at.pop(shard_id, None)
                elif found:
                    self._ended[shard_id] = (tries, later + CHILD_CONFIRM_MILLIS, found)
                elif tries < len(CHILD_RETRY_MILLIS):
                    self._ended[shard_id] = (tries + 1, later + CHILD_RETRY_MILLIS[tries], 0)
                else:
                    self._ended.pop(shard_id, None)
                    self._ended_at.pop(shard_id, None)
                    log.info(
                        "children of %s not listed yet; the fleet's next listing will find them", shard_id
                    )

    def _failed_lookup_wait(self) -> int:
        """The wait after a failed lookup (lock held): growing as the failures in a row do, never
        beyond one taker interval, so a lookup follows a dependency's return within one."""
        self._lookups_failing += 1
        step = CHILD_RETRY_MILLIS[min(self._lookups_failing, len(CHILD_RETRY_MILLIS)) - 1]
        return max(1, min(step, self._settings.taker_interval_millis))

    def next_children_due(self) -> int | None:
        """When the next children lookup is due (monotonic ms), or None when none is pending."""
        with self._lock:
            return min((at for _, at, _ in self._ended.values()), default=None)

    def sync_children(self, parent_id: str) -> int | None:
        """Create the leases of ``parent_id``'s children (one filtered DescribeStream call); how many
        children were listed (0: none yet, ask again; THROTTLED: refused for throttling, FAILED: a
        table or the stream failed the lookup, both asked again without counting as a try), or None
        when there is nothing to do from here.

        The lineage generation is read first and the parent's lease after it: if the parent's lease is
        still there, none of its children can have been cleaned up before (a lease is deleted only once
        its parent's is gone), and a cleanup after the read refuses the creates. A parent already
        cleaned up means its children were leased and have progressed."""
        if self._list_children is None:
            self._full_now = True
            return None
        try:
            generation = self._coordinator.lineage_generation()
            parent = self._coordinator.read_lease(parent_id)
            if parent is None or not parent.finished:
                return None  # cleaned up (children done), or not finished after all: the listing decides
            children = [c for c in self._list_children(parent_id) if parent_id in c.parent_shard_ids]
            if not children:
                return 0  # DescribeStream does not show them yet
            created = 0
            for child in children:
                lease = Lease(
                    child.shard_id,
                    None,
                    0,
                    ExtendedSequenceNumber(TRIM_HORIZON),
                    parent_shard_ids=frozenset(child.parent_shard_ids),
                )
                created += self._coordinator.create_leases([lease], generation)
        except LineageChangedError as exc:
            # A cleanup landed between the generation read and the create: look again (the next try
            # reads the generation and the parent afresh; a parent gone by then needs nothing).
            log.info("children of %s: %s; asking again", parent_id, exc)
            return 0
        except ThrottledError as exc:
            log.info("children of %s: DescribeStream throttled (asking again): %s", parent_id, exc)
            return THROTTLED
        except (StreamSourceError, LeaseError) as exc:
            log.warning("children of %s not looked up (retrying): %s", parent_id, exc)
            return FAILED
        if created:
            log.info("shard %s ended: %d child leases created", parent_id, created)
        return len(children)

    def wake(self) -> None:
        """Cut both threads' waits short (a stop was requested)."""
        self._wake.set()
        self._children_wake.set()

    def run(self, stop: Event, first_after_millis: int | None = None) -> None:
        """The listing thread: the whole stream every interval while this worker is the fleet's sync
        leader (module docstring), or at once when a shard ended and children cannot be looked up.
        The first round comes ``first_after_millis`` after the start (default: one interval)."""
        interval = self._settings.shard_sync_interval_millis
        first = interval if first_after_millis is None else first_after_millis
        next_listing = self._clock.monotonic_millis() + first
        while not stop.is_set():
            wait = next_listing - self._clock.monotonic_millis()
            if wait > 0 and not self._full_now:
                self._wake.wait(wait / 1000)
            self._wake.clear()
            if stop.is_set():
                return
            full_now, self._full_now = self._full_now, False
            if full_now or self._clock.monotonic_millis() >= next_listing:
                began = self._clock.monotonic_millis()
                if full_now:
                    self.sync()
                else:
                    self.sync_if_leader()
                next_listing = began + self.next_listing_in_millis()

    def run_children(self, stop: Event) -> None:
        """The children thread: ended shards' children looked up when due. Its own thread, so that a
        long paced listing (hundreds of pages on the leader) never delays a child's lease."""
        while not stop.is_set():
            due = self.next_children_due()
            wait = None if due is None else due - self._clock.monotonic_millis()
            if wait is None or wait > 0:
                self._children_wake.wait(None if wait is None else wait / 1000)
            self._children_wake.clear()
            if stop.is_set():
                return
            self.sync_children_due()
            if self._full_now:
                self._wake.set()

    def report_open_shards(self) -> None:
        """Publish the last listing's open shards again while this worker is the sync leader (called
        before every metrics flush): a listing of a large stream takes longer than the alarms'
        period, and N must not go missing from the scaling alarms meanwhile."""
        if self.open_shards is not None and self._coordinator.is_sync_leader():
            self._metrics.gauge("ShardSyncTask", "OpenShards", self.open_shards, "Count")

    def sync_if_leader(self) -> ShardSyncPlan | None:
        """A periodic round: the whole stream if this worker is the fleet's sync leader."""
        if not self._coordinator.is_sync_leader():
            self.listing_failed = False  # the leader's to retry
            return None
        return self.sync()

    def next_listing_in_millis(self) -> int:
        """From the start of a listing round to the next: an interval, or at most a taker interval
        after a whole sync that failed (module docstring)."""
        interval = self._settings.shard_sync_interval_millis
        if self.listing_failed:
            return max(1, min(interval, self._settings.taker_interval_millis))
        return interval

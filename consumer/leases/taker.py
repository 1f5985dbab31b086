"""Taking: scan the tables, reconcile what I hold, ask the pure plan what to do, do it.

One round: :meth:`Taker.round` scans (eventually consistent), drops leases the scan shows changed
hands, re-adopts leases that are still mine after a fence (only while unfenced, and only by a take
that moves the counter), then asks :func:`~consumer.leases.decisions.plan_round` for takes, steal
requests and sheds, and performs them with conditional writes.

A scan may be stale: it can show an owner's heartbeat older than it is. So before taking a lease
from an owner judged dead, the owner's heartbeat row is read again *consistently*; a live owner keeps
its lease. If the owner's next heartbeat lands after that read, it lands after the owner's own fence
deadline (the owner's row was already older than failover + skew), and the fence has dropped the
lease on the owner's side before its heartbeat can extend anything (:mod:`consumer.leases.holdings`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from consumer.leases.dealing import DealingView
from consumer.leases.decisions import (
    KclExpiryTracker,
    RoundPlan,
    Timing,
    dead_heartbeats,
    hand_over_overdue,
    live_workers,
    plan_round,
    relief,
    successor,
)
from consumer.leases.errors import (
    CheckpointRefusedError,
    LeaseConflictError,
    LeaseError,
    LeaseStoreUnavailableError,
)
from consumer.leases.holdings import Holdings
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot
from consumer.leases.not_taken import NotTaken
from consumer.leases.reading import RoundReader
from consumer.leases.shortfall import Shortfall
from consumer.leases.store import LeaseStore
from consumer.telemetry.metrics import Metrics
from ground.clock import Clock
from ground.settings import WorkerSettings
from ground.threads import SYSTEM_THREADS, Threads

log = logging.getLogger("consumer.leases")

Notify = Callable[[str, str, Lease | None], None]


@dataclass
class Taker:
    store: LeaseStore
    me: str
    settings: WorkerSettings
    holdings: Holdings
    clock: Clock
    metrics: Metrics
    notify: Notify
    rng: random.Random
    capacity_advice: str | None = None  # consumer.leases.advice.capacity_advice for the settings
    # Told as every round begins (None) and ends (its reads succeeded, why not). The heartbeat file
    # of ``consumer run --heartbeat-file`` (consumer.telemetry.health.HeartbeatFile.record).
    on_round: Callable[[bool | None, str | None], None] | None = None
    # The fleet has not joined while fewer workers than the group's minimum run (shortfall.py).
    expected_workers: int = 1
    # The locks of a lock held across a call to the tables (dealing.py): a simulation's own.
    threads: Threads = SYSTEM_THREADS
    # Told when this worker leaves leases free for others (children it created and did not take, a
    # lease released to nobody): the heartbeat row says so at once (Heartbeat.new_leases_at).
    on_left_free: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self.timing = Timing.of(self.settings)
        self.kcl = KclExpiryTracker(self.timing.failover_millis)
        self.latest = Snapshot({}, {})
        self.last_plan = RoundPlan()
        self.failures = 0  # consecutive failed scans
        self.taking = True
        self._asked: dict[str, int] = {}  # hand-overs I asked for, and when (monotonic ms)
        self._taken_at: dict[str, int] = {}  # leases I took up lately, and when (monotonic ms)
        self._created: set[str] = set()  # leases I created that no full scan of mine has shown yet
        self._avoid: dict[str, int] = {}  # leases given up as stalled here, until when (monotonic ms)
        self._stuck: frozenset[str] = frozenset()  # ... and those whose stalled call has not returned
        self._children_of: tuple[Snapshot | None, frozenset[str]] = (None, frozenset())  # (scan, parents)
        self.not_taken = NotTaken(self.me, self.settings, self.clock)
        self.reader = RoundReader(self.store, self.me, self.settings, self.timing, self.clock, self.metrics)
        self.shortfall = Shortfall(
            self.me,
            settings=self.settings,
            timing=self.timing,
            clock=self.clock,
            advice=self.capacity_advice,
            expected_workers=self.expected_workers,
        )
        self._recovered_at: int | None = None  # wall time my own reads or heartbeats worked again
        # What a stopping worker deals its leases from (dealing.py): read again, not the last round's.
        self.dealing = DealingView(
            self.store, self.clock, max(self.settings.taker_interval_millis // 8, 1), self.threads.lock()
        )

    def wait_millis(self) -> int:
        """The pause before the next round. Half the taking interval: a round without a full scan is
        one small read of the workers table, so looking twice per interval costs little and brings a
        dead worker's leases, and a stopping worker's hand-overs, back within the interval rather
        than up to a whole one after it. While another worker is stopping gracefully, or a hand-over
        this worker asked for is on its way, a quarter: the lease is handed over once the owner's
        batch in flight is done, and adopted at the next round (at half an interval, a rolling
        deploy's thief took one up 2 s after its owner let it go). After a
        failed read, one whole interval: a throttled or unreachable table is asked half as often,
        and the back-off never outgrows one interval, so whenever an outage ends the leases are
        taken up within one taking interval (the heartbeat's first success after an outage also
        wakes the taker at once, coordinator.heartbeat_once)."""
        interval = self.settings.taker_interval_millis
        if self.failures == 0:
            soon = self.reader.handing or self._awaiting_hand_over()
            return max(interval // (4 if soon else 2), 1)
        return max(interval, 1)

    # ---------------------------------------------------------------------------- round

    def round(self) -> RoundPlan | None:
        """One round: read who is alive, scan the leases table if something may need doing
        (:func:`~consumer.leases.reading.full_scan_reason`), and act on the plan. None when no plan
        was made (a failed read, a light round, fenced, or stopping)."""
        started = self.clock.monotonic_millis()
        self._observed(None, None)
        try:
            snapshot, full = self.reader.read(
                self.latest, self._held(), self.last_plan, self._awaiting_hand_over()
            )
        except LeaseError as exc:
            self.failures += 1
            log.warning(
                "worker %s: leases-table scan failed (%s); next try in %d ms",
                self.me,
                exc,
                self.wait_millis(),
            )
            self.metrics.timing("TakeLeases", "ListLeases", self.clock.monotonic_millis() - started, False)
            self._observed(False, f"{type(exc).__name__}: {exc}")
            return None
        if self.failures:
            self.note_recovery()
        self.failures = 0
        self._observed(True, None)
        self.latest = snapshot
        self._record_unwritten()
        if full:
            for bad in snapshot.malformed:
                log.error("leases table: %s (left untouched; fix or delete the item)", bad.problem)
            self._reconcile(snapshot)
        if self.holdings.fenced(self.clock.monotonic_millis()) or not self.taking:
            return None
        if not full:
            self._release_overdue()
            self._retire_dead_workers(self._forgiving(snapshot))
            self.metrics.timing("TakeLeases", "TakeLeases", self.clock.monotonic_millis() - started, True)
            return None
        self._adopt(snapshot)
        self._release_overdue()
        plan = plan_round(
            self.me,
            self._forgiving(snapshot),
            self.clock.wall_millis(),
            self.timing,
            max_leases_for_worker=self.settings.max_leases_for_worker,
            max_leases_to_steal=self.settings.max_leases_to_steal_at_one_time,
            kcl_expired=self.kcl.observe(snapshot, self.clock.monotonic_millis()),
            rng=self.rng,
            keep=self._recently_taken(),
            avoid=self._avoiding(),
        )
        self._execute(plan, snapshot)
        self._left_created_free(snapshot)
        self._retire_dead_workers(self._forgiving(snapshot))
        self.last_plan = plan
        self.reader.held_after_plan = self._held()
        self._report(plan, snapshot, self.clock.monotonic_millis() - started)
        return plan

    def created(self, shard_ids: Sequence[str]) -> None:
        """Shard sync created these leases (a shard's children, or new shards): the next round scans
        the whole table for them, instead of waiting for the full-scan interval, so a child starts
        within a taking interval of its parent's end."""
        self._created.update(shard_ids)
        self.reader.created += 1

    def _left_created_free(self, snapshot: Snapshot) -> None:
        """Leases I created that this full scan shows free after my takes: I had no room for them, so
        the others are told (on_left_free) rather than left to find them at their full-scan interval."""
        shown = {s for s in set(self._created) if s in snapshot.leases}  # a copy: shard sync adds
        free = [
            s
            for s in shown
            if snapshot.leases[s].owner is None
            and not snapshot.leases[s].finished
            and not self.holdings.holds(s)
        ]
        self._created -= shown
        if free:
            self._left_free()

    def _left_free(self) -> None:
        if self.on_left_free is not None:
            try:
                self.on_left_free()
            except Exception:  # telling the others is an optimisation; it never stops the lease loop
                log.exception("worker %s: could not announce free leases", self.me)

    def note_recovery(self) -> None:
        """My reads or my heartbeat work again after failing: the tables were out for me too."""
        self._recovered_at = self.clock.wall_millis()

    def _forgiving(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with no heartbeat older than the end of my own outage, for failover + skew
        after it. A row that went stale while the tables refused me as well says nothing about its
        worker: the outage was everyone's (a DynamoDB brownout), and the first worker back would
        otherwise take every other worker's leases before they could beat once -- lease churn,
        replays and a slower resume. A worker that really died meanwhile is taken over failover +
        skew after the outage instead of at once."""
        recovered = self._recovered_at
        if recovered is None:
            return snapshot
        if self.clock.wall_millis() - recovered > self.timing.horizon_millis:
            self._recovered_at = None
            return snapshot
        beats = {
            worker: replace(beat, at_wall_millis=max(beat.at_wall_millis, recovered))
            for worker, beat in snapshot.heartbeats.items()
        }
        return replace(snapshot, heartbeats=beats)

    def _observed(self, ok: bool | None, error: str | None) -> None:
        if self.on_round is not None:
            try:
                self.on_round(ok, error)
            except Exception:  # an observer never stops the lease loop
                log.exception("worker %s: the round observer failed", self.me)

    def _held(self) -> int:
        return sum(1 for lease in self.holdings.leases() if not lease.finished)

    def _report(self, plan: RoundPlan, snapshot: Snapshot, elapsed: int) -> None:
        self.metrics.timing("TakeLeases", "TakeLeases", elapsed, True)
        self.metrics.count("TakeLeases", "ExpiredLeases", plan.expired)
        self.metrics.gauge("TakeLeases", "NumWorkers", plan.workers, "Count")
        self.metrics.gauge("TakeLeases", "LeaseSpillover", plan.spillover, "Count")
        self.metrics.gauge("TakeLeases", "TotalLeases", len(snapshot.leases), "Count")
        self.metrics.gauge("TakeLeases", "NeededLeases", max(0, plan.target - plan.mine), "Count")
        shortfall = self.shortfall.observe(plan, snapshot)
        self.metrics.gauge("TakeLeases", "ReadyLeasesUnassigned", shortfall, "Count")
        # Items that are not in KCL's format are never taken, changed or deleted: an operator must fix them.
        self.metrics.gauge("TakeLeases", "MalformedLeases", len(snapshot.malformed), "Count")
        if shortfall:
            self.shortfall.warn(plan)
        cap = self.settings.max_leases_for_worker
        room = plan.mine < cap and not self.holdings.fenced(self.clock.monotonic_millis())
        left = self.not_taken.observe(snapshot, room, frozenset(self._avoid) | self._stuck)
        self.metrics.gauge("TakeLeases", "LeasesNotTaken", len(left), "Count")

    # ------------------------------------------------------------------------ reconcile

    def _reconcile(self, snapshot: Snapshot) -> None:
        """Drop leases that changed hands; never on a scan older than my own write."""
        seen = {lease.shard_id: snapshot.leases.get(lease.shard_id) for lease in self.holdings.leases()}
        lost = self.holdings.reconcile(seen, self.me)
        for shard_id in lost:
            log.warning("worker %s: lease %s was taken by another worker", self.me, shard_id)
            self.notify("lost", shard_id, snapshot.leases.get(shard_id))
        if lost:
            self.metrics.count("RenewAllLeases", "LostLeases", len(lost))

    def _adopt(self, snapshot: Snapshot) -> None:
        """Leases the table says are mine but I do not hold: handed over to me, or mine from before a
        fence. Adopt each by taking it from myself, which moves the counter: a worker that judged me
        dead and sends its take late names the old counter and loses. Adopting on a read alone would
        let that late take succeed while I process the shard again."""
        avoided = self._avoiding()
        for seen in snapshot.leases.values():
            if seen.owner != self.me or seen.finished or self.holdings.holds(seen.shard_id):
                continue
            if seen.shard_id in avoided:
                self._hand_on_stalled(seen.shard_id)
                continue
            sent_fence_at = self.holdings.fence_at()
            try:
                # A consistent read first, never the scan's copy: a checkpoint does not move the
                # counter, so a take conditional on the scan's owner and counter can succeed on a
                # lease whose checkpoint moved on since, and resume before it (the fault model's
                # seeds 1 001 497 and 1 001 994 replayed a record that way).
                current = self.store.get(seen.shard_id)
                if current is None or current.owner != self.me or current.finished:
                    continue
                if self._fenced_now():
                    return
                since = self.holdings.continuing(current)
                adopted = self._take(current)
                # Read after the take: a checkpoint of mine refused because this take landed first
                # notes its position meanwhile (coordinator.checkpoint).
                unwritten = self.holdings.unwritten_for(adopted)
            except LeaseError:
                continue
            if unwritten is not None:
                adopted = self._resume_at(adopted, unwritten)
            if self._hold(adopted, "re-adopted", sent_fence_at, since):
                log.info(
                    "worker %s re-adopted %s at counter %d (%s)",
                    self.me,
                    adopted.shard_id,
                    adopted.counter,
                    "a new ownership" if since is None else f"continuing the ownership from counter {since}",
                )

    def _record_unwritten(self) -> None:
        """Record positions processed under leases I lost hold of (the fence dropped them while the
        table refused their checkpoints). The write names the counter I held: it lands only if nobody
        took the lease since, so the next owner starts after those records instead of replaying them;
        it is about records already processed, so the fence (which stops processing) allows it."""
        for lease, position in self.holdings.unwritten_unheld():
            try:
                self.store.checkpoint(lease, position)
            except LeaseConflictError as exc:
                now = exc.current
                if now is not None and now.owner in (self.me, None) and not now.finished:
                    # Mine again at another counter (my own take-back that landed and was answered
                    # with an error, or a hand-over to me), or free (released by me when its hand-over
                    # was overdue, or by whoever took it meanwhile): keep the position. Whoever takes
                    # it next is me or another worker; if me, the take writes it if it is still ahead
                    # (unwritten_for) instead of replaying records I processed.
                    continue
                self.holdings.forget_unwritten(lease.shard_id)  # somebody else holds it now
                log.info("worker %s: %s of %s not recorded: %s", self.me, position, lease.shard_id, exc)
                continue
            except CheckpointRefusedError as exc:
                self.holdings.forget_unwritten(lease.shard_id)  # it moved on, or the shard ended
                log.info("worker %s: %s of %s not recorded: %s", self.me, position, lease.shard_id, exc)
                continue
            except LeaseError:
                continue  # still refused: next round
            self.holdings.written(lease.shard_id, position)  # not one noted further on meanwhile
            log.info(
                "worker %s: recorded %s of %s after losing hold of it", self.me, position, lease.shard_id
            )

    def _resume_at(self, adopted: Lease, position: ExtendedSequenceNumber) -> Lease:
        """I processed the records up to ``position`` and the table refused to record it; the lease is
        mine again (taken back, handed to me, or taken from nobody): record it rather than replay
        them. Forward only (unwritten_for): someone who got further wins. If the table still
        refuses, the position is kept on the held lease (the lifecycle starts after it) and written
        with the next checkpoint."""
        try:
            adopted = self.store.checkpoint(adopted, position)
            self.holdings.written(adopted.shard_id, position)
        except LeaseError:
            adopted = replace(adopted, checkpoint=position)
            self.holdings.note_unwritten(adopted, position)
        log.info(
            "worker %s: %s resumes after %s, which it processed before it lost the lease",
            self.me,
            adopted.shard_id,
            position,
        )
        return adopted

    # -------------------------------------------------------------------------- execute

    def _fenced_now(self) -> bool:
        """Checked again just before each take: a round's reads can be slow, and a take sent while
        fenced moves a counter this worker cannot use, under a worker that may be taking it."""
        return self.holdings.fenced(self.clock.monotonic_millis())

    def _take(self, seen: Lease) -> Lease:
        """A conditional take. A conflict is never resolved as "my write landed": the same state can
        come from an earlier take of mine that I have since stopped using (fenced, finished), and
        holding it again without moving the counter would let a worker that judged me dead take it
        under me. A take that did land shows up in the next scan as mine and is re-adopted then."""
        return self.store.take(seen, self.me)

    def _hold(self, lease: Lease, how: str, sent_fence_at: int | None, since: int | None = None) -> bool:
        if not self.holdings.add(lease, self.clock.monotonic_millis(), sent_fence_at, since):
            log.info("worker %s: %s %s after its fence deadline; not using it", self.me, how, lease.shard_id)
            return False
        self._taken_at[lease.shard_id] = self.clock.monotonic_millis()
        self.notify("taken", lease.shard_id, lease)
        return True

    def avoid(self, shard_id: str, until_mono: int, *, stuck: bool = False) -> None:
        """Do not take or steal ``shard_id`` before ``until_mono``, nor while ``stuck`` until
        :meth:`unstuck`: it stalled here (give_up_stalled)."""
        self._avoid[shard_id] = until_mono
        if stuck:
            self._stuck = self._stuck | {shard_id}  # rebound, never changed: read by the taker's thread

    def unstuck(self, shard_id: str) -> None:
        """The stalled call on ``shard_id`` returned: only its stall timeout keeps it avoided."""
        self._stuck = self._stuck - {shard_id}

    def _avoiding(self) -> frozenset[str]:
        now = self.clock.monotonic_millis()
        self._avoid = {s: until for s, until in self._avoid.items() if now < until}
        return frozenset(self._avoid) | self._stuck

    def shards_with_children(self) -> frozenset[str]:
        """Shards a lease of the latest full scan names as a parent (worked out once per scan)."""
        latest = self.latest
        seen, parents = self._children_of
        if seen is not latest:
            parents = frozenset(p for lease in latest.leases.values() for p in lease.parent_shard_ids)
            self._children_of = (latest, parents)
        return parents

    def _recently_taken(self) -> frozenset[str]:
        """Leases taken or handed to me within the last two taking intervals: a shed gives others up
        first, so that a shard just moved here does not move again at once (and pause twice)."""
        now = self.clock.monotonic_millis()
        window = 2 * self.settings.taker_interval_millis
        self._taken_at = {s: at for s, at in self._taken_at.items() if now - at < window}
        return frozenset(self._taken_at)

    def _owner_still_dead(self, lease: Lease, snapshot: Snapshot, checked: dict[str, bool]) -> bool:
        """Re-read the owner's heartbeat consistently: the scan that judged it dead may be stale."""
        owner = lease.owner
        if owner is None or owner == self.me or owner not in snapshot.heartbeats:
            return True  # free, mine, or judged by KCL's counter rule (the take's condition covers it)
        if lease.pending_owner == self.me and hand_over_overdue(lease, self.clock.wall_millis(), self.timing):
            return True  # a forced take of an overdue hand-over: the owner stopped at its deadline
        # Asked of it and not overdue yet, a lease is taken only from an owner that really is dead:
        # the scan's two tables may be stale apart, the pending mark fresh and the row old.
        if owner not in checked:
            # Judge the row by the time the read was *sent*: the read happens at or after it, and an
            # answer that arrives late (a paused worker, a slow call) says nothing about the time
            # between. Measured after the answer, a row read long ago would look dead.
            asked = self.clock.wall_millis()
            beat = self.store.get_heartbeat(owner)
            horizon = self.timing.horizon_millis
            seen_at = None if beat is None else max(beat.at_wall_millis, self._recovered_at or 0)
            checked[owner] = seen_at is None or asked - seen_at > horizon
        return checked[owner]

    def _execute(self, plan: RoundPlan, snapshot: Snapshot) -> None:
        taken = 0
        checked: dict[str, bool] = {}
        spares = [list(pool) for pool in plan.spare]
        queue = list(plan.take)
        while queue:
            lease = queue.pop(0)
            sent_fence_at = self.holdings.fence_at()
            try:
                if not self._owner_still_dead(lease, snapshot, checked):
                    log.info(
                        "worker %s: %s's owner %s is alive after all", self.me, lease.shard_id, lease.owner
                    )
                    continue
                if self._fenced_now():
                    break
                got = self._take(lease)
                # A position of mine the table refused before I lost the lease (it was released or
                # expired meanwhile) is written now rather than replayed, as a take-back does.
                unwritten = self.holdings.unwritten_for(got)
            except LeaseConflictError:
                # Somebody else was faster: try the next free lease of the same pool instead.
                pool = next((p for p in spares if p), None)
                if pool is not None:
                    queue.append(pool.pop(0))
                continue
            except LeaseStoreUnavailableError as exc:
                log.warning("take %s failed: %s", lease.shard_id, exc)
                break
            if unwritten is not None:
                got = self._resume_at(got, unwritten)
            if self._hold(got, "took", sent_fence_at):
                taken += 1
                log.info("worker %s took lease %s from %s", self.me, got.shard_id, lease.owner or "(nobody)")
        self.metrics.count("TakeLeases", "TakenLeases", taken)
        for lease in plan.steal:
            self._ask(lease)
        for lease in plan.shed:
            self.holdings.mark_shed(lease.shard_id)
        for lease, to in plan.hand_over:
            asked = lease.pending_since
            if self.holdings.ask_hand_over(
                lease.shard_id, to, None if asked is None else self.stop_by(asked)
            ):
                self.asked(lease.shard_id, to)

    def asked(self, shard_id: str, thief: str | None) -> None:
        """A thief's request for a lease I hold became known (on my heartbeat row, or as the lease's
        pending owner in a scan, whichever came first): say so, and wake the shard's consumer (the
        'asked' event), which hands the lease over after its batch in flight."""
        log.info(
            "worker %s: %s asks for %s; handing it over after the batch in flight", self.me, thief, shard_id
        )
        self.notify("asked", shard_id, None)

    def stop_by(self, asked_at_wall: int) -> int:
        """When the owner of a lease asked for at ``asked_at_wall`` must stop using it (failover -
        margin later): the thief may force a take only at failover + skew (conditions.py)."""
        return asked_at_wall + self.settings.fence_after_millis

    def _ask(self, lease: Lease) -> None:
        try:
            # Ask on the owner's heartbeat row first; pendingSince is read after that write landed,
            # so the forced-take timer starts no earlier than the owner's stop timer.
            asked_at = self.clock.wall_millis()
            self.store.ask_hand_over(lease.owner or "", HandOverRequest(lease.shard_id, self.me, asked_at))
            self.store.request_steal(lease, self.me, self.clock.wall_millis())
            log.info("worker %s asked %s to hand over %s", self.me, lease.owner, lease.shard_id)
        except LeaseError:
            return
        self._asked[lease.shard_id] = self.clock.monotonic_millis()

    def _awaiting_hand_over(self) -> bool:
        """A lease I asked for may be handed to me now: scan every round until it is mine, or until
        failover + skew passed (its owner is forced out then). The owner hands it over after its
        batch in flight, and a round without a full scan would not see it: the thief took it up a
        full-scan interval later (7 s of a shard paused in the rolling-deploy bench)."""
        horizon = self.timing.horizon_millis
        now = self.clock.monotonic_millis()
        self._asked = {
            shard: at
            for shard, at in self._asked.items()
            if now - at <= horizon and not self.holdings.holds(shard)
        }
        return bool(self._asked)

    # ------------------------------------------------------------------------ overdue

    def hand_over_overdue(self, shard_id: str) -> bool:
        """A thief asked for this lease longer than failover - margin ago (by my clock): stop."""
        deadline = self.holdings.hand_over_deadline(shard_id)
        return deadline is not None and self.clock.wall_millis() > deadline

    def _release_overdue(self) -> None:
        """Leases asked for long ago and still held: nothing processes them any more, so give them up
        rather than leave them stranded (e.g. the thief died after asking). Done a margin after the
        deadline, when a live thief may force anyway."""
        now = self.clock.wall_millis()
        self.release_overdue(self.holdings.overdue(now, self.settings.fence_margin_millis))

    def release_overdue(self, shard_ids: Sequence[str]) -> None:
        """Release these overdue hand-overs -- except a lease whose records are being delivered: its
        delivery may have processed records beyond the checkpoint (lanes run ahead of it), and a
        release now would let the next owner deliver them again. The delivery stops at its next
        record (may_process is false once overdue) and the release follows it
        (LeaseCoordinator.delivering), recording the position it reached first."""
        live = live_workers(self.latest, self.clock.wall_millis(), self.timing)
        for shard_id in shard_ids:
            if self.holdings.being_delivered(shard_id) or not self.holdings.holds(shard_id):
                continue
            if self.holdings.thief(shard_id) not in live:
                self.holdings.forget_thief(shard_id)  # the thief is gone: free it for anyone
            log.warning("worker %s: hand-over of %s overdue; releasing it", self.me, shard_id)
            self.release(shard_id)

    def _hand_on_stalled(self, shard_id: str) -> None:
        """A lease given up as stalled here whose release did not land, or that another worker gave
        up to me (the table names me): release it again, never adopt it back while it is avoided.
        While its call here is stuck it goes free, not to a named worker: that one may have a call
        stuck on it too and would hand it straight back."""
        try:
            current = self.store.get(shard_id)
            if current is None or current.owner != self.me or current.finished:
                return
            to = None if shard_id in self._stuck else self._relief(shard_id)
            self.store.release(current, to)
        except LeaseError as exc:
            log.info("worker %s: stalled %s not released yet (%s); next round", self.me, shard_id, exc)
            return
        log.info("worker %s released lease %s%s", self.me, shard_id, f" to {to}" if to else "")
        if to is None:
            self._left_free()

    def _relief(self, shard_id: str) -> str | None:
        return relief(
            self.me,
            self.latest,
            self.clock.wall_millis(),
            self.timing,
            shard_id=shard_id,
            cap=self.settings.max_leases_for_worker,
        )

    def release_stalled(self, shard_id: str, counter: int | None = None) -> None:
        """Give up a lease that stalled here, to the least loaded other live worker (relief), which
        adopts it at its next round; free if there is none."""
        self.release(shard_id, counter, to=self._relief(shard_id))

    def release(self, shard_id: str, counter: int | None = None, *, to: str | None = None) -> None:
        """Give a lease up: to the thief that asked for it; while stopping, to a named survivor who
        takes it up at its next round; to ``to`` when named; else (a shed) free."""
        lease, asked_to = self.holdings.remove(shard_id, counter)
        if lease is None:
            return
        to = asked_to or to
        if to is None and not lease.finished and not self.taking:
            # A thief that asked for it and is alive comes first: a lease handed to anybody else
            # would be handed on to it at once, and its shard would pause twice.
            asked = lease.pending_owner
            live = live_workers(self.latest, self.clock.wall_millis(), self.timing)
            to = asked if asked not in (None, self.me) and asked in live else self._successor(shard_id)
        lease = self._record_before_release(lease)
        try:
            released = self.store.release(lease, to)
        except LeaseConflictError as exc:
            now = exc.current
            if now is not None and now.owner == to and now.counter == lease.counter + 1:
                released = now  # my release landed, then its retry failed the condition
            else:
                self.notify("lost", shard_id, now)  # already somebody else's: nothing to release
                return
        except LeaseError as exc:
            log.warning("release %s failed (it will expire instead): %s", shard_id, exc)
            self.notify("released", shard_id, None)
            return
        log.info("worker %s released lease %s%s", self.me, shard_id, f" to {to}" if to else "")
        if to is not None and not self.taking:
            self.dealing.handed(released)
        if to is None and not released.finished:
            self._left_free()
        self.notify("released", shard_id, released)

    def redeal_from_stoppers(self) -> None:
        """A graceful stop's last step, before my row goes (dealing.DealingView.redeal)."""
        self.dealing.redeal(
            self.me, self.latest, self.timing, max_leases_for_worker=self.settings.max_leases_for_worker
        )

    def _record_before_release(self, lease: Lease) -> Lease:
        """A position I processed to but could not record (a checkpoint refused for now) is written
        before the lease goes: whoever takes it next starts after those records instead of
        replaying them. Forward only and conditional on my counter; if it fails, the release says why."""
        pending = self.holdings.unwritten_for(lease)
        if pending is None:
            return lease
        try:
            recorded = self.store.checkpoint(lease, pending)
        except LeaseError as exc:
            log.info(
                "worker %s: %s of %s not recorded before release: %s", self.me, pending, lease.shard_id, exc
            )
            return lease
        self.holdings.written(lease.shard_id, pending)
        log.info("worker %s: recorded %s of %s before releasing it", self.me, pending, lease.shard_id)
        return recorded

    def _successor(self, shard_id: str) -> str | None:
        """While stopping: the survivor that takes this lease up at its next round (decisions.successor),
        dealt from a view read for the stop (dealing.py), not the last round's."""
        return successor(
            self.me,
            self.dealing.current(self.latest),
            self.clock.wall_millis(),
            self.timing,
            shard_id=shard_id,
            max_leases_for_worker=self.settings.max_leases_for_worker,
        )

    def _retire_dead_workers(self, snapshot: Snapshot) -> None:
        for worker in dead_heartbeats(snapshot, self.clock.wall_millis(), self.timing):
            beat: Heartbeat = snapshot.heartbeats[worker]
            try:
                self.store.delete_heartbeat(beat)
            except LeaseError:
                continue

"""Runs the lease protocol for one worker: the façade the lifecycle and shard sync talk to.

It composes three small parts, each tested on its own:

- :class:`~consumer.leases.holdings.Holdings` — what I hold and until when I may use it (the fence);
- :class:`~consumer.leases.liveness.Liveness` — my heartbeat row, written every ``renewal_interval``
  on the *heartbeat* thread;
- :class:`~consumer.leases.taker.Taker` — scan → reconcile → pure plan → conditional writes, every
  ``taker_interval`` on the *taker* thread.

Neither thread ever waits for record processing or for the other. Fencing takes effect at the
deadline itself: :meth:`may_process` and :meth:`checkpoint` are refused from the moment the last
heartbeat that succeeded *started* more than ``failover - margin`` ago, and everything held is
dropped then (announced as ``lost``), so no late heartbeat can bring it back.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from consumer.leases.decisions import RoundPlan, Timing, live_workers, sync_leader
from consumer.leases.errors import LeaseConflictError, LeaseError, LeaseLostError
from consumer.leases.holdings import Holdings
from consumer.leases.liveness import Liveness
from consumer.leases.model import ExtendedSequenceNumber, Lease, Snapshot
from consumer.leases.store import LeaseStore
from consumer.leases.taker import Taker
from consumer.streams.pacing import FleetPosition
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.settings import WorkerSettings
from ground.threads import SYSTEM_THREADS, Running, Threads

log = logging.getLogger("consumer.leases")

LeaseEventKind = Literal["taken", "lost", "released", "finished", "asked"]
CHECKPOINT_ATTEMPTS = 3  # tries of one checkpoint (LeaseCoordinator.checkpoint)
WRITTEN: Literal["written"] = "written"
AGAIN: Literal["again"] = "again"


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    """A change in what this worker holds, for listeners (the lifecycle reconciles on them).

    ``taken``: I own it now (taken, handed over to me, or re-adopted after a fence); ``lost``: it was
    taken from me or I fenced myself, stop without checkpointing; ``released``: I gave it up
    gracefully; ``finished``: I checkpointed SHARD_END, the lease stays in the table ownerless;
    ``asked``: another worker asked for it -- its consumer hands it over after the batch in flight
    (woken now, not after an idle back-off that may outlast the hand-over's deadline).
    """

    kind: LeaseEventKind
    shard_id: str
    lease: Lease | None


LeaseListener = Callable[[LeaseEvent], None]


class LeaseCoordinator:
    def __init__(
        self,
        store: LeaseStore,
        worker_id: str,
        settings: WorkerSettings,
        clock: Clock,
        *,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
        capacity_advice: str | None = None,
        expected_workers: int = 1,
        on_round: Callable[[bool | None, str | None], None] | None = None,
        threads: Threads = SYSTEM_THREADS,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self.timing = Timing.of(settings)
        self.fence_margin_millis = settings.fence_margin_millis
        self.holdings = Holdings(settings.fence_after_millis)
        self.liveness = Liveness(
            store=store,
            worker_id=worker_id,
            holdings=self.holdings,
            clock=clock,
            metrics=self._metrics,
            renewal_interval_millis=settings.renewal_interval_millis,
            stale_request_millis=settings.expiry_horizon_millis,
        )
        self.taker = Taker(
            store,
            worker_id,
            settings,
            self.holdings,
            clock,
            self._metrics,
            self._notify_kind,
            rng or random.Random(),
            capacity_advice=capacity_advice,
            expected_workers=expected_workers,
            on_round=self._round_observer(on_round),
            threads=threads,
            on_left_free=self._left_free,
        )
        self._stop = threads.event()
        self._beat_now = threads.event()  # wakes the heartbeat loop before its interval is up
        self._take_now = threads.event()  # wakes the taker loop: the tables answer again
        self._threads_of = threads
        self._beat_failing = False
        self._expected_workers = expected_workers
        self._view: tuple[str, ...] = ()
        self._view_since = clock.monotonic_millis()
        self._view_lock = threading.Lock()
        self._threads: list[Running] = []
        self._listeners: list[LeaseListener] = []

    def _round_observer(
        self, outside: Callable[[bool | None, str | None], None] | None
    ) -> Callable[[bool | None, str | None], None]:
        """Each round's outcome to my heartbeat row (Liveness) and to ``outside`` (the heartbeat file)."""

        def observed(ok: bool | None, error: str | None) -> None:
            self.liveness.round_observed(ok)
            if outside is not None:
                outside(ok, error)

        return observed

    # ---------------------------------------------------------------------- listeners

    def add_listener(self, listener: LeaseListener) -> None:
        """Call ``listener`` on every taken / lost / released / finished lease, from the thread that
        noticed it (heartbeat, taker or the caller of checkpoint/release): it must not block."""
        self._listeners.append(listener)

    def _notify_kind(self, kind: str, shard_id: str, lease: Lease | None) -> None:
        event = LeaseEvent(kind, shard_id, lease)  # type: ignore[arg-type]
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("lease listener failed on %s %s", kind, shard_id)

    def _announce_lost(self, dropped: Sequence[str], why: str) -> None:
        if not dropped:
            return
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        log.warning("worker %s dropped %d leases: %s (%s)", self.worker_id, len(dropped), why, shown)
        self._metrics.count("RenewAllLeases", "LostLeases", len(dropped))
        for shard_id in dropped:
            self._notify_kind("lost", shard_id, None)

    def _expire(self) -> None:
        self._announce_lost(
            self.holdings.expire(self._clock.monotonic_millis()),
            "fenced: no heartbeat succeeded within failover - margin",
        )

    # ------------------------------------------------------------------------ threads

    @property
    def taking(self) -> bool:
        return self.taker.taking

    @property
    def last_plan(self) -> RoundPlan:
        return self.taker.last_plan

    @property
    def taker_failures(self) -> int:
        return self.taker.failures

    def start(self) -> None:
        """Register (first heartbeat and scan, synchronously) and start the two loops."""
        self.heartbeat_once()
        self.take_round()
        for name, target in (("heartbeat", self._heartbeat_loop), ("taker", self._taker_loop)):
            self._threads.append(self._threads_of.start(f"lease-{name}", target))

    def stop_taking(self) -> None:
        """Graceful stop, first step: take nothing more (shed leases are handed off by the lifecycle),
        and say so on the heartbeat row from the next beat on, so that the others scan the leases
        table every round and adopt what this worker hands them without waiting for a full scan."""
        self.taker.taking = False
        self.liveness.stopping = True
        self._beat_now.set()  # the row says so now, not an interval later

    def stop(self, release: bool = True) -> None:
        self.taker.taking = False
        self.liveness.stopping = True
        self._stop.set()
        self._beat_now.set()
        self._take_now.set()
        for thread in self._threads:
            thread.join(timeout=self.settings.drain_millis / 1000)
        if release:
            self.release_all()
            self.taker.redeal_from_stoppers()
            self.liveness.retire()

    def _heartbeat_loop(self) -> None:
        wait = self.settings.renewal_interval_millis
        while True:
            self._beat_now.wait(wait / 1000)
            self._beat_now.clear()
            if self._stop.is_set():
                return
            wait = self.liveness.next_wait_millis(self.heartbeat_once())

    def _left_free(self) -> None:
        """This worker left leases free for others: its row says so at once (Heartbeat.new_leases_at),
        so every worker with room scans for them at its next round."""
        self.liveness.new_leases_at = self._clock.wall_millis()
        self._beat_now.set()

    def taker_wait_millis(self) -> int:
        return self.taker.wait_millis()

    def _taker_loop(self) -> None:
        while True:
            self._take_now.wait(self.taker.wait_millis() / 1000)
            self._take_now.clear()
            if self._stop.is_set():
                return
            if self.taker.taking:
                self.take_round()
            else:
                self._expire()

    # -------------------------------------------------------------- heartbeat and taking

    def heartbeat_once(self) -> bool:
        self._expire()
        result = self.liveness.beat()
        if result.ok and (self._beat_failing or self.taker.failures):
            # The tables answer again after an outage: take up my leases (and any others) now rather
            # than at the end of the taker's back-off, so work resumes within one taker interval.
            self.taker.note_recovery()
            self._take_now.set()
        self._beat_failing = not result.ok
        self._announce_lost(result.dropped, "fenced before the heartbeat landed, or heartbeat row removed")
        for request in result.requests:
            deadline = self.taker.stop_by(request.at_wall_millis)
            if self.holdings.ask_hand_over(request.shard_id, request.thief, deadline):
                self.taker.asked(request.shard_id, request.thief)
        return result.ok

    def take_round(self) -> RoundPlan | None:
        self._expire()
        return self.taker.round()

    def fenced(self) -> bool:
        return self.holdings.fenced(self._clock.monotonic_millis())

    def hand_over_overdue(self, shard_id: str) -> bool:
        return self.taker.hand_over_overdue(shard_id)

    # ----------------------------------------------------------- what the lifecycle calls

    def held(self) -> Sequence[Lease]:
        self._expire()
        return self.holdings.leases()

    def may_process(self, shard_id: str, counter: int | None = None) -> bool:
        """Held, not fenced, no overdue hand-over, and (with ``counter``) still under the ownership
        that counter belongs to: a take-back of an untouched lease continues it, any other take
        (somebody else held the shard meanwhile) starts a new one."""
        lease, dropped = self.holdings.get(shard_id, self._clock.monotonic_millis())
        self._announce_lost(dropped, "fenced: no heartbeat succeeded within failover - margin")
        if lease is None or (counter is not None and not self.holdings.within(shard_id, counter)):
            return False
        return not self.taker.hand_over_overdue(shard_id)

    def handoff_requested(self, shard_id: str) -> bool:
        return self.holdings.handoff_requested(shard_id)

    @contextmanager
    def delivering(self, shard_id: str) -> Iterator[None]:
        """Around a delivery of the shard's records to its processor. A hand-over that runs overdue
        meanwhile does not release the lease under it (taker._release_overdue): the delivery's records
        may be processed (lanes run ahead of the checkpoint) and their checkpoint, refused once the
        hand-over is overdue, is noted; the release waits until the delivery has returned, then
        records that position first, so the next owner starts after what was processed here instead
        of delivering it again."""
        self.holdings.delivering(shard_id, +1)
        try:
            yield
        finally:
            self.holdings.delivering(shard_id, -1)
            # A fenced worker writes nothing: its leases are dropped (and taken by expiry), not
            # released -- the delivery may return long after the deadline (a paused process).
            self._expire()
            if self.taker.hand_over_overdue(shard_id) and not self.holdings.being_delivered(shard_id):
                self.taker.release_overdue([shard_id])

    def is_shard_finished(self, shard_id: str) -> bool:
        seen = self.taker.latest.leases.get(shard_id)
        if seen is not None and seen.finished:
            return True
        current = self.store.get(shard_id)
        return current is None or current.finished

    def checkpoint(
        self, shard_id: str, position: str | ExtendedSequenceNumber, counter: int | None = None
    ) -> None:
        """Record progress. Raises LeaseLostError when the lease is not (provably) mine any more or,
        with ``counter``, is held under a later ownership than the caller's;
        CheckpointRefusedError when ``position`` is behind the last checkpoint or the shard ended,
        ValueError for text that is neither digits nor a KCL sentinel.

        A bounded loop of tries, at most :data:`CHECKPOINT_ATTEMPTS`: a write refused because my own
        take-back of the untouched lease (after a fence) landed while it was on its way is written
        again under the new counter — the same ownership goes on; a lease whose counter keeps moving
        under this worker that often is treated as lost."""
        target = (
            position if isinstance(position, ExtendedSequenceNumber) else ExtendedSequenceNumber(position)
        )
        later: Lease | None = None  # the lease, when held under a later ownership than the caller's
        for _ in range(CHECKPOINT_ATTEMPTS):
            try:
                step = self._checkpoint_once(shard_id, target, None if later is not None else counter)
            except LeaseError:
                if later is None:
                    raise
                step = WRITTEN  # recording an earlier ownership's progress is best effort
            if isinstance(step, Lease):
                # Progress made under an earlier ownership of a shard this worker holds again: the
                # records are processed, so it is recorded under the current ownership if it moves
                # the checkpoint on (the next consumer then starts after them instead of replaying
                # them); the caller still stops, it must not go on from its own, older position.
                later = step
                if step.checkpoint < target:
                    continue
                step = WRITTEN
            if step is WRITTEN:
                if later is not None:
                    raise LeaseLostError("checkpoint (held under a later ownership now)", shard_id, later)
                return
        raise LeaseLostError("checkpoint (the counter kept moving under this worker)", shard_id, later)

    def _checkpoint_once(
        self, shard_id: str, target: ExtendedSequenceNumber, counter: int | None
    ) -> Literal["written", "again"] | Lease:
        """One try of :meth:`checkpoint`: WRITTEN, AGAIN (my own take-back landed meanwhile), or the
        lease when it is held under a later ownership than ``counter``'s."""
        lease, dropped = self.holdings.get(shard_id, self._clock.monotonic_millis())
        self._announce_lost(dropped, "fenced: no heartbeat succeeded within failover - margin")
        if lease is None:
            if self.holdings.refused_after_letting_go(shard_id, target):
                log.info(
                    "worker %s: checkpoint %s of %s arrived after the lease was given up; kept while "
                    "the lease is free, to be written if this worker takes it again",
                    self.worker_id,
                    target,
                    shard_id,
                )
                raise LeaseLostError("checkpoint (the lease was given up)", shard_id, None)
            fenced = self.holdings.refused_by_fence(shard_id, target)
            if fenced:
                log.info(
                    "worker %s: checkpoint %s of %s refused by the fence; kept, to be written when the "
                    "lease is taken up again",
                    self.worker_id,
                    target,
                    shard_id,
                )
            why = "checkpoint (fenced: heartbeats are failing)" if fenced else "checkpoint"
            raise LeaseLostError(why, shard_id, None)
        if counter is not None and not self.holdings.within(shard_id, counter):
            return lease
        if self.taker.hand_over_overdue(shard_id):
            # Processing had to stop, but these records are processed: the release that follows (or
            # a take-back, if the thief never comes) records the position, conditional on my
            # counter, instead of leaving them to be replayed.
            self.holdings.note_unwritten(lease, target)
            raise LeaseLostError("checkpoint (a hand-over to another worker is overdue)", shard_id, None)
        started = self._clock.monotonic_millis()
        self.holdings.writing(shard_id, +1)
        try:
            updated = self._write_checkpoint(lease, target)
        except LeaseLostError as exc:
            self._metrics.timing(
                "UpdateLease", "UpdateLease", self._clock.monotonic_millis() - started, False
            )
            self.holdings.written(shard_id)
            if self._taken_back_meanwhile(lease, target, exc.current):
                return AGAIN
            had, _ = self.holdings.remove(shard_id, lease.counter)
            if had is not None:
                self._notify_kind("lost", shard_id, exc.current)
            raise
        except LeaseError:
            self._metrics.timing(
                "UpdateLease", "UpdateLease", self._clock.monotonic_millis() - started, False
            )
            # Throttled or timed out: if this worker is fenced before it can write it, and takes the
            # lease back untouched, the position is written then instead of replaying the records;
            # while it holds the lease, the next shard consumer starts after it (Holdings.leases).
            self.holdings.note_unwritten(lease, target)
            raise
        finally:
            self.holdings.writing(shard_id, -1)
        self.holdings.written(shard_id, target)
        self._metrics.timing("UpdateLease", "UpdateLease", self._clock.monotonic_millis() - started, True)
        if updated.finished:
            # A finished lease needs no owner: it stays in the table (children check it) until cleanup.
            self.holdings.remove(shard_id, lease.counter)
            self._notify_kind("finished", shard_id, updated)
        else:
            self.holdings.update(updated)
        return WRITTEN

    def _taken_back_meanwhile(self, lease: Lease, target: ExtendedSequenceNumber, now: Lease | None) -> bool:
        """A checkpoint of ``lease`` was refused, the table showing ``now``: is it my own take-back of
        the untouched lease (after a fence) that landed while the write was on its way? Then the
        ownership goes on and the write goes again under the counter it has now (True). If it is
        mine again at another counter by a take not answered yet, the take-back resumes after this
        position (taker._adopt) rather than replaying it; so does a take-back already adopted."""
        shard_id = lease.shard_id
        log.info(
            "worker %s: checkpoint %s of %s refused: the table shows owner %s, counter %s (held %s)",
            self.worker_id,
            target,
            shard_id,
            now.owner if now else None,
            now.counter if now else None,
            lease.counter,
        )
        if now is None or now.owner != self.worker_id:
            return False
        held_now, _ = self.holdings.get(shard_id, self._clock.monotonic_millis())
        if (
            held_now is not None
            and held_now.counter == now.counter != lease.counter
            and self.holdings.within(shard_id, lease.counter)
        ):
            log.info(
                "worker %s: %s of %s written again under counter %d (the same ownership)",
                self.worker_id,
                target,
                shard_id,
                now.counter,
            )
            return True
        if held_now is None:
            self.holdings.note_unwritten(lease, target)
        elif held_now.counter == now.counter and not held_now.finished:
            # Mine again under a new ownership, adopted before this answer came (a take-back after a
            # fence): the records up to the target were processed under the old one, so the next
            # consumer of the shard here starts after them and its checkpoint or release writes them
            # (Holdings.leases), forward only, instead of handling them a second time.
            self.holdings.note_unwritten(held_now, target)
        return False

    def _write_checkpoint(self, lease: Lease, target: ExtendedSequenceNumber) -> Lease:
        """A conditional checkpoint; a refusal that shows my own write (it landed, then the retry
        failed its condition — a SHARD_END checkpoint always does) is a success."""
        try:
            return self.store.checkpoint(lease, target)
        except LeaseLostError as exc:
            now = exc.current
            if (
                now is not None
                and now.owner == lease.owner
                and now.counter == lease.counter
                and now.checkpoint == target
            ):
                return now
            raise

    def release(self, shard_id: str, counter: int | None = None) -> None:
        self.taker.release(shard_id, counter)

    def give_up_stalled(self, shard_id: str, counter: int | None = None, *, stuck: bool = False) -> None:
        """A stalled shard (consumer.lifecycle.stalls): released for another worker to take; this
        worker's taker leaves it alone for a stall timeout, so it does not come straight back here,
        and while ``stuck`` (its call here never returned: taking it again would hang another thread)."""
        timeout = self.settings.stall_timeout_millis or 0
        self.taker.avoid(shard_id, self._clock.monotonic_millis() + timeout, stuck=stuck)
        self._expire()  # fenced: dropped, never released
        self.taker.release_stalled(shard_id, counter)

    def stalled_call_returned(self, shard_id: str) -> None:
        self.taker.unstuck(shard_id)

    def shards_with_children(self) -> frozenset[str]:
        return self.taker.shards_with_children()

    def release_all(self) -> None:
        for lease in self.holdings.leases():
            self.release(lease.shard_id)

    # ------------------------------------------------------------- what shard sync calls

    def scan(self) -> Snapshot:
        return self.store.scan()

    def read_lease(self, shard_id: str) -> Lease | None:
        """The lease as the table holds it now (a consistent read)."""
        return self.store.get(shard_id)

    def is_sync_leader(self) -> bool:
        """Whether this worker lists the whole stream for the fleet, judged on its latest scan
        (:func:`consumer.leases.decisions.sync_leader`)."""
        latest = self.taker.latest
        return sync_leader(self.worker_id, latest, self._clock.wall_millis(), self.timing) == self.worker_id

    def fleet_position(self) -> FleetPosition | None:
        """Where this worker stands in the fleet's DescribeStream timetable (consumer.streams.pacing):
        its rank among the live workers, their number (at least the group's minimum) and whether it
        is the sync leader -- or None until it has seen itself in a scan and the live workers have
        stayed the same for one taker interval (a fleet starting together would otherwise give one
        slot to several workers while they join)."""
        latest = self.taker.latest
        if self.worker_id not in latest.heartbeats:
            return None
        live = tuple(sorted(live_workers(latest, self._clock.wall_millis(), self.timing) | {self.worker_id}))
        now = self._clock.monotonic_millis()
        with self._view_lock:
            if live != self._view:
                self._view, self._view_since = live, now
            if now - self._view_since < self.settings.taker_interval_millis:
                return None
        return FleetPosition(
            live.index(self.worker_id), max(len(live), self._expected_workers), live[0] == self.worker_id
        )

    def claim_first_start(self) -> bool:
        return self.store.claim_first_start(self.worker_id, self._clock.wall_millis())

    def lineage_generation(self) -> int:
        return self.store.lineage_generation()

    def create_leases(self, leases: Sequence[Lease], generation: int | None = None) -> int:
        """Create each lease unless it exists; with ``generation``, only while no cleanup has
        happened since it was read (raises LineageChangedError at the first that finds one). The
        taker scans for what was created at once (Taker.created): a child waits for no interval."""
        created: list[Lease] = []
        try:
            for lease in leases:
                if self.store.create_if_absent(lease, generation):
                    created.append(lease)
        finally:
            if created:
                self.taker.created(created)
                self._take_now.set()
        return len(created)

    def delete_finished(self, lease: Lease) -> None:
        self.store.delete_finished(lease)

    def delete_lease(self, shard_id: str) -> bool:
        """Shard-sync cleanup by id: deletes the lease only if it is at SHARD_END (consistent read
        first); False when it is not finished or already gone. A live lease is never deleted."""
        current = self.store.get(shard_id)
        if current is None or not current.finished:
            return False
        try:
            self.store.delete_finished(current)
        except LeaseConflictError:
            return False
        return True

    def latest_snapshot(self) -> Snapshot:
        return self.taker.latest

"""Runs the lease protocol for one worker: heartbeats, taker rounds, fencing, hand-offs.

Two daemon threads, neither of which ever waits for record processing or for the other:

- the *heartbeat* thread writes this worker's heartbeat row every ``renewal_interval``;
- the *taker* thread scans the table every ``taker_interval``, reconciles what this worker holds,
  asks :func:`~consumer.leases.decisions.plan_round` what to do and performs it with conditional writes.

Fencing: :meth:`may_process` turns false for every lease once the last heartbeat that succeeded was
*started* more than ``failover - margin`` ago. Another worker may take a lease only when that heartbeat
is older than ``failover + skew`` on its own clock — so a worker that cannot renew (partitioned,
throttled, paused) has stopped processing and checkpointing at least ``margin`` before anybody can
take over, whatever the clocks say within the skew bound. A checkpoint is refused while fenced, and
the conditional write refuses it anyway once the lease changed hands.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from consumer.clock import Clock
from consumer.leases.decisions import (
    KclExpiryTracker,
    RoundPlan,
    Timing,
    dead_heartbeats,
    live_workers,
    plan_round,
)
from consumer.leases.errors import (
    LeaseConflictError,
    LeaseError,
    LeaseLostError,
    LeaseStoreUnavailableError,
)
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot
from consumer.leases.store import LeaseStore
from consumer.settings import WorkerSettings
from consumer.telemetry.metrics import Metrics, NullMetrics

log = logging.getLogger("consumer.leases")

LeaseEventKind = Literal["taken", "lost", "released", "finished"]


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    """A change in what this worker holds, for listeners (the lifecycle reconciles on them).

    ``taken``: I own it now (taken, handed over to me, or re-adopted after a fence); ``lost``: it was
    taken from me or I fenced myself, stop without checkpointing; ``released``: I gave it up
    gracefully; ``finished``: I checkpointed SHARD_END, the lease stays in the table ownerless.
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
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._rng = rng or random.Random()
        self.timing = Timing(settings.failover_time_millis, settings.max_clock_skew_millis)
        self.fence_margin_millis = max(settings.failover_time_millis // 5, settings.epsilon_millis)
        self._lock = threading.Lock()
        self._held: dict[str, Lease] = {}
        self._handoff: dict[str, str | None] = {}
        # Wall-clock ms after which a lease asked for by a thief may no longer be processed or
        # checkpointed (request time + failover - margin): the thief may force a take at + failover + skew.
        self._deadline: dict[str, int] = {}
        self._heartbeat_counter: int | None = None
        self._last_heartbeat_ok: int | None = None  # monotonic ms at which the last good heartbeat started
        self._latest = Snapshot({}, {})
        self._kcl = KclExpiryTracker(settings.failover_time_millis)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.taking = True
        self.last_plan = RoundPlan()
        self._listeners: list[LeaseListener] = []
        # Consecutive failed scans: the taker waits interval x 2^n (at most failover) before the next.
        self.taker_failures = 0

    def add_listener(self, listener: LeaseListener) -> None:
        """Call ``listener`` on every taken / lost / released / finished lease, from the thread that
        noticed it (heartbeat, taker or the caller of checkpoint/release): it must not block."""
        self._listeners.append(listener)

    def _notify(self, kind: LeaseEventKind, shard_id: str, lease: Lease | None) -> None:
        event = LeaseEvent(kind, shard_id, lease)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("lease listener failed on %s %s", kind, shard_id)

    # ------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Register (first heartbeat and scan, synchronously) and start the two loops."""
        self.heartbeat_once()
        self.take_round()
        for name, target in (("heartbeat", self._heartbeat_loop), ("taker", self._taker_loop)):
            thread = threading.Thread(target=target, name=f"lease-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop_taking(self) -> None:
        """Graceful stop, first step: take nothing more (shed leases are handed off by the lifecycle)."""
        self.taking = False

    def stop(self, release: bool = True) -> None:
        self.taking = False
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.settings.failover_time_millis / 1000)
        if release:
            self.release_all()
            self._retire_heartbeat()

    def _heartbeat_loop(self) -> None:
        # After a failed heartbeat, retry after a third of the interval: a transient error (or one
        # throttled request) must not cost the worker its leases, and fencing at failover - margin
        # leaves room for about five attempts instead of two.
        interval = self.settings.renewal_interval_millis
        wait = interval
        while not self._stop.wait(wait / 1000):
            wait = interval if self.heartbeat_once() else max(interval // 3, 1)

    def taker_wait_millis(self) -> int:
        """The pause before the next taker round: the interval, doubled per consecutive failed scan
        (a throttled or unreachable table is not hammered), never beyond failover."""
        interval = self.settings.taker_interval_millis
        return min(interval << min(self.taker_failures, 8), max(interval, self.timing.failover_millis))

    def _taker_loop(self) -> None:
        while not self._stop.wait(self.taker_wait_millis() / 1000):
            if self.taking:
                self.take_round()

    # ------------------------------------------------------------------------- heartbeat

    def heartbeat_once(self) -> bool:
        started = self._clock.monotonic_millis()
        if self._held and self.fenced():
            # We were fenced (paused, partitioned, throttled): others may have taken our leases since.
            # Forget them all; the next scan re-adopts, after a consistent read, any still ours.
            self._drop_all("fenced: no successful heartbeat within failover - margin")
        with self._lock:
            expected = self._heartbeat_counter
            count = len(self._held)
        beat = Heartbeat(self.worker_id, (expected or 0) + 1, self._clock.wall_millis(), count)
        try:
            requests = self.store.heartbeat(beat, expected)
        except LeaseConflictError:
            # My row is gone or was overwritten: I was judged dead. Whatever I held may be taken.
            log.error(
                "worker %s: heartbeat row was removed by another worker; dropping all leases", self.worker_id
            )
            self._metrics.timing(
                "RenewAllLeases", "RenewLease", self._clock.monotonic_millis() - started, False
            )
            self._drop_all("heartbeat row lost")
            with self._lock:
                self._heartbeat_counter = None
            return False
        except LeaseError as exc:
            log.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)
            self._metrics.timing(
                "RenewAllLeases", "RenewLease", self._clock.monotonic_millis() - started, False
            )
            return False
        with self._lock:
            self._heartbeat_counter = beat.counter
            self._last_heartbeat_ok = started
            for request in requests:
                if request.shard_id in self._held:
                    self._ask_hand_over(request.shard_id, request.thief, request.at_wall_millis)
        self._metrics.timing("RenewAllLeases", "RenewLease", self._clock.monotonic_millis() - started, True)
        self._metrics.gauge("RenewAllLeases", "CurrentLeases", count, "Count")
        return True

    def fenced(self) -> bool:
        with self._lock:
            last = self._last_heartbeat_ok
        if last is None:
            return True
        return (
            self._clock.monotonic_millis() - last
            > self.settings.failover_time_millis - self.fence_margin_millis
        )

    # ------------------------------------------------------------------------- taker

    def take_round(self) -> RoundPlan | None:
        started = self._clock.monotonic_millis()
        try:
            snapshot = self.store.scan()
        except LeaseError as exc:
            self.taker_failures += 1
            log.warning(
                "worker %s: leases-table scan failed (%s); next try in %d ms",
                self.worker_id,
                exc,
                self.taker_wait_millis(),
            )
            self._metrics.timing("TakeLeases", "ListLeases", self._clock.monotonic_millis() - started, False)
            return None
        self.taker_failures = 0
        for bad in snapshot.malformed:
            log.error("leases table: %s (left untouched; fix or delete the item)", bad.problem)
        self._latest = snapshot
        self._reconcile(snapshot)
        self._release_overdue()
        if self.fenced() or not self.taking:
            return None
        plan = plan_round(
            self.worker_id,
            snapshot,
            self._clock.wall_millis(),
            self.timing,
            max_leases_for_worker=self.settings.max_leases_for_worker,
            max_leases_to_steal=self.settings.max_leases_to_steal_at_one_time,
            kcl_expired=self._kcl.observe(snapshot, self._clock.monotonic_millis()),
            rng=self._rng,
        )
        self._execute(plan)
        self._retire_dead_workers(snapshot)
        self.last_plan = plan
        elapsed = self._clock.monotonic_millis() - started
        self._metrics.timing("TakeLeases", "TakeLeases", elapsed, True)
        self._metrics.count("TakeLeases", "ExpiredLeases", plan.expired)
        self._metrics.gauge("TakeLeases", "NumWorkers", plan.workers, "Count")
        self._metrics.gauge("TakeLeases", "LeaseSpillover", plan.spillover, "Count")
        self._metrics.gauge("TakeLeases", "TotalLeases", len(snapshot.leases), "Count")
        self._metrics.gauge("TakeLeases", "NeededLeases", max(0, plan.target - plan.mine), "Count")
        # Items that are not in KCL's format are never taken, changed or deleted: an operator must fix them.
        self._metrics.gauge("TakeLeases", "MalformedLeases", len(snapshot.malformed), "Count")
        return plan

    def _reconcile(self, snapshot: Snapshot) -> None:
        """Drop leases that changed hands; adopt leases handed to me; never regress a checkpoint."""
        lost: list[str] = []
        with self._lock:
            for shard_id, mine in list(self._held.items()):
                seen = snapshot.leases.get(shard_id)
                if seen is None or seen.owner != self.worker_id or seen.counter != mine.counter:
                    if seen is not None and seen.counter < mine.counter:
                        continue  # an eventually consistent scan older than my own write
                    del self._held[shard_id]
                    self._handoff.pop(shard_id, None)
                    self._deadline.pop(shard_id, None)
                    lost.append(shard_id)
                elif seen.pending_owner != mine.pending_owner:
                    self._held[shard_id] = replace(
                        mine, pending_owner=seen.pending_owner, pending_since=seen.pending_since
                    )
            unknown = [
                seen
                for shard_id, seen in snapshot.leases.items()
                if seen.owner == self.worker_id and shard_id not in self._held and not seen.finished
            ]
        for seen in unknown:
            # Handed over to me, or mine from before a fence. Adopt it by taking it from myself, which
            # moves the counter: a worker that judged me dead from an older scan and sends its take
            # late names the old counter and loses. Adopting on a read alone would let that late take
            # succeed while I process the shard again, and two workers would process it.
            try:
                current = self.store.get(seen.shard_id)
                if current is None or current.owner != self.worker_id or current.finished:
                    continue
                adopted = self.store.take(current, self.worker_id)
            except LeaseError:
                continue
            with self._lock:
                self._held[adopted.shard_id] = adopted
                self._deadline.pop(adopted.shard_id, None)
            self._notify("taken", adopted.shard_id, adopted)
        for shard_id in lost:
            log.warning("worker %s: lease %s was taken by another worker", self.worker_id, shard_id)
            self._notify("lost", shard_id, snapshot.leases.get(shard_id))
        if lost:
            self._metrics.count("RenewAllLeases", "LostLeases", len(lost))

    def _execute(self, plan: RoundPlan) -> None:
        taken = 0
        spares = [list(pool) for pool in plan.spare]
        queue = list(plan.take)
        while queue:
            lease = queue.pop(0)
            try:
                got = self.store.take(lease, self.worker_id)
            except LeaseConflictError:
                # Somebody else was faster: try the next free lease of the same pool instead.
                pool = next((p for p in spares if p), None)
                if pool is not None:
                    queue.append(pool.pop(0))
                continue
            except LeaseStoreUnavailableError as exc:
                log.warning("take %s failed: %s", lease.shard_id, exc)
                break
            with self._lock:
                self._held[got.shard_id] = got
                self._deadline.pop(got.shard_id, None)
            taken += 1
            self._notify("taken", got.shard_id, got)
            log.info(
                "worker %s took lease %s from %s", self.worker_id, got.shard_id, lease.owner or "(nobody)"
            )
        self._metrics.count("TakeLeases", "TakenLeases", taken)
        for lease in plan.steal:
            try:
                # Ask on the owner's heartbeat row first; pendingSince is read after that write landed,
                # so the forced-take timer starts no earlier than the owner's stop timer.
                asked_at = self._clock.wall_millis()
                self.store.ask_hand_over(
                    lease.owner or "", HandOverRequest(lease.shard_id, self.worker_id, asked_at)
                )
                self.store.request_steal(lease, self.worker_id, self._clock.wall_millis())
                log.info("worker %s asked %s to hand over %s", self.worker_id, lease.owner, lease.shard_id)
            except (LeaseConflictError, LeaseStoreUnavailableError):
                continue
        with self._lock:
            for lease in plan.shed:
                if lease.shard_id in self._held and lease.shard_id not in self._handoff:
                    self._handoff[lease.shard_id] = None
            for lease, to in plan.hand_over:
                if lease.shard_id in self._held:
                    self._handoff[lease.shard_id] = to
                    if lease.pending_since is not None:
                        self._ask_hand_over(lease.shard_id, to, lease.pending_since)

    def _ask_hand_over(self, shard_id: str, thief: str | None, asked_at_wall: int) -> None:
        """Note a hand-over request (call with the lock held): hand the lease over after the batch
        in flight, and stop processing it at the deadline whatever the lifecycle is doing."""
        if self._handoff.get(shard_id) is None:
            self._handoff[shard_id] = thief
        deadline = asked_at_wall + self.timing.failover_millis - self.fence_margin_millis
        self._deadline[shard_id] = min(deadline, self._deadline.get(shard_id, deadline))

    def _release_overdue(self) -> None:
        """Leases asked for long ago and still held: nothing processes them any more (may_process has
        been false since the deadline), so give them up rather than leave them stranded, e.g. when the
        thief died after asking. Done a margin after the deadline, when a live thief may force anyway."""
        now = self._clock.wall_millis()
        with self._lock:
            overdue = [
                shard_id
                for shard_id, deadline in self._deadline.items()
                if shard_id in self._held and now > deadline + self.fence_margin_millis
            ]
        live = live_workers(self._latest, now, self.timing)
        for shard_id in overdue:
            with self._lock:
                if self._handoff.get(shard_id) not in live:
                    self._handoff[shard_id] = None  # the thief is gone: free it for anyone
            log.warning("worker %s: hand-over of %s overdue; releasing it", self.worker_id, shard_id)
            self.release(shard_id)

    def hand_over_overdue(self, shard_id: str) -> bool:
        """A thief asked for this lease longer than failover - margin ago (by my clock): stop."""
        with self._lock:
            deadline = self._deadline.get(shard_id)
        return deadline is not None and self._clock.wall_millis() > deadline

    def _retire_dead_workers(self, snapshot: Snapshot) -> None:
        for worker in dead_heartbeats(snapshot, self._clock.wall_millis(), self.timing):
            try:
                self.store.delete_heartbeat(snapshot.heartbeats[worker])
            except LeaseError:
                continue

    def _retire_heartbeat(self) -> None:
        with self._lock:
            counter = self._heartbeat_counter
        if counter is None:
            return
        with contextlib.suppress(LeaseError):
            self.store.delete_heartbeat(Heartbeat(self.worker_id, counter, 0))

    def _drop_all(self, why: str) -> None:
        with self._lock:
            dropped = sorted(self._held)
            self._held.clear()
            self._handoff.clear()
            self._deadline.clear()
        if dropped:
            log.warning("worker %s dropped %d leases: %s", self.worker_id, len(dropped), why)
            self._metrics.count("RenewAllLeases", "LostLeases", len(dropped))
        for shard_id in dropped:
            self._notify("lost", shard_id, None)

    # ----------------------------------------------------------- what the lifecycle calls

    def held(self) -> Sequence[Lease]:
        with self._lock:
            return list(self._held.values())

    def may_process(self, shard_id: str) -> bool:
        with self._lock:
            holds = shard_id in self._held
        return holds and not self.fenced() and not self.hand_over_overdue(shard_id)

    def handoff_requested(self, shard_id: str) -> bool:
        with self._lock:
            return shard_id in self._handoff

    def is_shard_finished(self, shard_id: str) -> bool:
        seen = self._latest.leases.get(shard_id)
        if seen is not None and seen.finished:
            return True
        current = self.store.get(shard_id)
        return current is None or current.finished

    def checkpoint(self, shard_id: str, position: str | ExtendedSequenceNumber) -> None:
        """Record progress. Raises LeaseLostError when the lease is not (provably) mine any more,
        CheckpointRefusedError when ``position`` is behind the last checkpoint or the shard ended,
        ValueError for text that is neither digits nor a KCL sentinel."""
        target = (
            position if isinstance(position, ExtendedSequenceNumber) else ExtendedSequenceNumber(position)
        )
        with self._lock:
            lease = self._held.get(shard_id)
        if lease is None:
            raise LeaseLostError("checkpoint", shard_id, None)
        if self.fenced():
            raise LeaseLostError("checkpoint (fenced: heartbeats are failing)", shard_id, None)
        if self.hand_over_overdue(shard_id):
            raise LeaseLostError("checkpoint (a hand-over to another worker is overdue)", shard_id, None)
        started = self._clock.monotonic_millis()
        try:
            updated = self.store.checkpoint(lease, target)
        except LeaseLostError as exc:
            self._metrics.timing(
                "UpdateLease", "UpdateLease", self._clock.monotonic_millis() - started, False
            )
            with self._lock:
                had = self._held.pop(shard_id, None) is not None
                self._handoff.pop(shard_id, None)
                self._deadline.pop(shard_id, None)
            if had:
                self._notify("lost", shard_id, exc.current)
            raise
        self._metrics.timing("UpdateLease", "UpdateLease", self._clock.monotonic_millis() - started, True)
        with self._lock:
            if updated.finished:
                # A finished lease needs no owner: it stays in the table (children check it) until cleanup.
                self._held.pop(shard_id, None)
                self._handoff.pop(shard_id, None)
                self._deadline.pop(shard_id, None)
            elif shard_id in self._held:
                self._held[shard_id] = updated
        if updated.finished:
            self._notify("finished", shard_id, updated)

    def release(self, shard_id: str) -> None:
        with self._lock:
            lease = self._held.pop(shard_id, None)
            to = self._handoff.pop(shard_id, None)
            self._deadline.pop(shard_id, None)
        if lease is None:
            return
        try:
            released = self.store.release(lease, to)
            log.info("worker %s released lease %s%s", self.worker_id, shard_id, f" to {to}" if to else "")
            self._notify("released", shard_id, released)
        except LeaseLostError as exc:
            self._notify("lost", shard_id, exc.current)  # already somebody else's: nothing to release
        except LeaseError as exc:
            log.warning("release %s failed (it will expire instead): %s", shard_id, exc)
            self._notify("released", shard_id, None)

    def release_all(self) -> None:
        for lease in self.held():
            self.release(lease.shard_id)

    def create_leases(self, leases: Sequence[Lease]) -> int:
        return sum(1 for lease in leases if self.store.create_if_absent(lease))

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
        return self._latest

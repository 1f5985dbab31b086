"""Runs the lease protocol for one worker: the face the lifecycle and shard sync talk to.

:class:`~consumer.leases.machine.machine.LeaseMachine` decides everything and does no I/O;
:class:`~consumer.leases.driver.MachineDriver` steps it under one lock and performs what it asks of
the lease store outside that lock. The coordinator turns each operation of the lifecycle and shard
sync into a step or a conversation of the machine, and runs two loops on the worker's threads: the
*heartbeat* every ``renewal_interval`` and the *taker* every half taking interval or so
(:meth:`LeaseMachine.wait_millis`). Neither ever waits for record processing or for the other.

Fencing takes effect at the deadline itself: :meth:`may_process` and :meth:`checkpoint` are refused
from the moment the last heartbeat that succeeded *started* more than ``failover - margin`` ago,
and everything held is dropped then (announced as ``lost``), so no late heartbeat can bring it back.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Literal, TypeVar

from consumer.leases.decisions import RoundPlan, Timing, waiting_parents
from consumer.leases.driver import LeaseListener, MachineDriver
from consumer.leases.errors import LeaseConflictError
from consumer.leases.machine.actions import Announce, Conversation, LeaseEventKind, Now
from consumer.leases.machine.holdings import Holdings
from consumer.leases.machine.machine import LeaseMachine
from consumer.leases.model import ExtendedSequenceNumber, Lease, Snapshot
from consumer.leases.store import LeaseStore
from consumer.streams.pacing import FleetPosition
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.settings import WorkerSettings
from ground.threads import SYSTEM_THREADS, Running, Threads

T = TypeVar("T")

LeaseEvent = Announce  # what a listener is told: consumer.leases.machine.actions.Announce
__all__ = ["LeaseCoordinator", "LeaseEvent", "LeaseEventKind", "LeaseListener"]


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
        self.timing = Timing.of(settings)  # the worker's one Timing: the machine judges with it
        self.fence_margin_millis = settings.fence_margin_millis
        self.machine = LeaseMachine(
            worker_id,
            settings,
            self.timing,
            Now(clock.monotonic_millis(), clock.wall_millis()),
            rng=rng or random.Random(),
            capacity_advice=capacity_advice,
            expected_workers=expected_workers,
        )
        self._driver = MachineDriver(
            self.machine, store, clock, metrics or NullMetrics(), threads, wake=self._wake, on_round=on_round
        )
        self._stop = threads.event()
        self._beat_now = threads.event()  # wakes the heartbeat loop before its interval is up
        self._take_now = threads.event()  # wakes the taker loop: the tables answer again
        self._threads_of = threads
        self._threads: list[Running] = []
        self._stuck_calls: Callable[[], frozenset[str]] = frozenset  # ask_stuck_calls

    @property
    def holdings(self) -> Holdings:
        """The machine's held leases, for tests and the simulator's directors to look at between
        steps; the worker's own code goes through the methods below, one step at a time."""
        return self.machine.state.holdings

    # ---------------------------------------------------------------------- the driver

    def _step(self, step: Callable[[LeaseMachine], T]) -> T:
        return self._driver.step(step)

    def drive(self, begin: Callable[[LeaseMachine], Conversation[T]]) -> T:
        """Run one conversation of the machine to its end (MachineDriver.drive): every operation
        below that touches the tables is one."""
        return self._driver.drive(begin)

    def _wake(self, loop: Literal["heartbeat", "taker"]) -> None:
        (self._beat_now if loop == "heartbeat" else self._take_now).set()

    def add_listener(self, listener: LeaseListener) -> None:
        """Call ``listener`` on every taken / lost / released / finished lease, from the thread that
        noticed it (heartbeat, taker or the caller of checkpoint/release): it must not block."""
        self._driver.listeners.append(listener)

    # ------------------------------------------------------------------------ threads

    @property
    def taking(self) -> bool:
        return self._step(lambda machine: machine.taking)

    @property
    def last_plan(self) -> RoundPlan:
        return self._step(lambda machine: machine.last_plan)

    @property
    def taker_failures(self) -> int:
        return self._step(lambda machine: machine.failures)

    def start(self) -> None:
        """Register (first heartbeat and scan, synchronously) and start the two loops."""
        self.heartbeat_once()
        self.take_round()
        for name, target in (("heartbeat", self._heartbeat_loop), ("taker", self._taker_loop)):
            self._threads.append(self._threads_of.start(f"lease-{name}", target))

    def stop_taking(self) -> None:
        """Graceful stop, first step: take nothing more (shed leases are handed off by the lifecycle),
        and say so on the heartbeat row from the next beat on -- now: the others scan the leases
        table every round and adopt what this worker hands them without waiting for a full scan."""
        self._step(lambda machine: machine.stop_taking())

    def stop(self, release: bool = True) -> None:
        self._step(lambda machine: machine.stop_taking())
        self._stop.set()
        self._beat_now.set()
        self._take_now.set()
        for thread in self._threads:
            thread.join(timeout=self.settings.drain_millis / 1000)
        if release:
            self.release_all()
            self.drive(LeaseMachine.redeal)
            self.drive(LeaseMachine.retire)

    def _heartbeat_loop(self) -> None:
        wait = self.settings.renewal_interval_millis
        while True:
            self._beat_now.wait(wait / 1000)
            self._beat_now.clear()
            if self._stop.is_set():
                return
            wait = self._step(partial(LeaseMachine.beat_wait_millis, last_ok=self.heartbeat_once()))

    def taker_wait_millis(self) -> int:
        return self._step(LeaseMachine.wait_millis)

    def _taker_loop(self) -> None:
        while True:
            self._take_now.wait(self.taker_wait_millis() / 1000)
            self._take_now.clear()
            if self._stop.is_set():
                return
            if self.taking:
                self.take_round()
            else:
                self._step(LeaseMachine.expire)

    # -------------------------------------------------------------- heartbeat and taking

    def heartbeat_once(self) -> bool:
        return self.drive(LeaseMachine.heartbeat)

    def take_round(self) -> RoundPlan | None:
        stuck = self._stuck_calls()  # asked before the round's first step, outside the machine's lock
        return self.drive(lambda machine: machine.take_round(stuck))

    def fenced(self) -> bool:
        return self._step(LeaseMachine.fenced)

    def hand_over_overdue(self, shard_id: str) -> bool:
        return self._step(lambda machine: machine.hand_over_overdue(shard_id))

    # ----------------------------------------------------------- what the lifecycle calls

    def held(self) -> Sequence[Lease]:
        return self._step(LeaseMachine.held)

    def may_process(self, shard_id: str, counter: int | None = None) -> bool:
        """Held, not fenced, no overdue hand-over, and (with ``counter``) still under the ownership
        that counter belongs to (LeaseMachine.may_process)."""
        return self._step(lambda machine: machine.may_process(shard_id, counter))

    def handoff_requested(self, shard_id: str) -> bool:
        return self._step(lambda machine: machine.handoff_requested(shard_id))

    @contextmanager
    def delivering(self, shard_id: str) -> Iterator[None]:
        """Around a delivery of the shard's records to its processor. A hand-over that runs overdue
        meanwhile does not release the lease under it: the delivery's records may be processed
        (lanes run ahead of the checkpoint) and their checkpoint, refused once the hand-over is
        overdue, is noted; the release waits until the delivery has returned, then records that
        position first, so the next owner starts after what was processed here instead of
        delivering it again (LeaseMachine.delivery_ended)."""
        self._step(lambda machine: machine.delivery_started(shard_id))
        try:
            yield
        finally:
            self.drive(lambda machine: machine.delivery_ended(shard_id))

    def waiting_parents(self, parent_shard_ids: Sequence[str]) -> tuple[str, ...]:
        """The parents a shard not started yet waits for (consumer.leases.decisions.waiting_parents):
        a parent finished in the latest view stays finished; any other is read afresh."""
        leased: dict[str, bool] = {}
        for parent in parent_shard_ids:
            if self._step(partial(_finished_in_view, parent)):
                leased[parent] = True
                continue
            current = self.store.get(parent)
            if current is not None:
                leased[parent] = current.finished
        return waiting_parents(parent_shard_ids, leased)

    def checkpoint(
        self, shard_id: str, position: str | ExtendedSequenceNumber, counter: int | None = None
    ) -> None:
        """Record progress. Raises LeaseLostError when the lease is not (provably) mine any more or,
        with ``counter``, is held under a later ownership than the caller's;
        CheckpointRefusedError when ``position`` is behind the last checkpoint or the shard ended,
        ValueError for text that is neither digits nor a KCL sentinel
        (:mod:`consumer.leases.machine.checkpoints`)."""
        self.drive(lambda machine: machine.checkpoint(shard_id, position, counter))

    def release(self, shard_id: str, counter: int | None = None) -> None:
        self.drive(lambda machine: machine.release(shard_id, counter))

    def give_up_stalled(self, shard_id: str, counter: int | None = None) -> None:
        """A stalled shard (consumer.lifecycle.stalls): released for another worker to take; this
        worker's taker leaves it alone for a stall timeout, so it does not come straight back here,
        and while its call here is stuck (:meth:`ask_stuck_calls`)."""
        self.drive(lambda machine: machine.give_up_stalled(shard_id, counter))

    def ask_stuck_calls(self, stuck: Callable[[], frozenset[str]]) -> None:
        """Where to ask, at each round, which stalled shards' calls here have not returned (the stall
        mover, which alone keeps that count): taking one back would hang a second thread on it."""
        self._stuck_calls = stuck

    def shards_with_children(self) -> frozenset[str]:
        return self._step(LeaseMachine.shards_with_children)

    def release_all(self) -> None:
        for lease in self._step(LeaseMachine.holding):
            self.release(lease.shard_id)

    # ------------------------------------------------------------- what shard sync calls

    def scan(self) -> Snapshot:
        return self.store.scan()

    def read_lease(self, shard_id: str) -> Lease | None:
        """The lease as the table holds it now (a consistent read)."""
        return self.store.get(shard_id)

    def is_sync_leader(self) -> bool:
        return self._step(LeaseMachine.is_sync_leader)

    def fleet_position(self) -> FleetPosition | None:
        return self._step(LeaseMachine.fleet_position)

    def claim_first_start(self) -> bool:
        return self.store.claim_first_start(self.worker_id, self._clock.wall_millis())

    def lineage_generation(self) -> int:
        return self.store.lineage_generation()

    def create_leases(self, leases: Sequence[Lease], generation: int | None = None) -> int:
        """Create each lease unless it exists; with ``generation``, only while no cleanup has
        happened since it was read (raises LineageChangedError at the first that finds one). The
        next round scans for what was created, at once, and the others are told when this worker has
        no room for it all (LeaseMachine.created): a child waits for no interval."""
        created: list[Lease] = []
        try:
            for lease in leases:
                if self.store.create_if_absent(lease, generation):
                    created.append(lease)
        finally:
            if created:
                self._step(lambda machine: machine.created(created))
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
        return self._step(lambda machine: machine.latest)


def _finished_in_view(shard_id: str, machine: LeaseMachine) -> bool:
    return machine.finished_in_view(shard_id)

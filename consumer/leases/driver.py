"""The lease machine's driver: the one place that waits on the lease store.

:class:`MachineDriver` steps :class:`~consumer.leases.machine.machine.LeaseMachine` under one lock,
at the time it reads from the clock then; performs each request a conversation makes *outside* that
lock (decide under the lock, do the I/O outside it) and feeds the answer back; and after every step
performs its notes: listeners told of taken, lost, released and finished leases, log lines, metrics,
the round observer, loops woken. Nothing in a step waits, so the lock is a plain one
(:mod:`ground.threads`); threads of the worker step the machine in turn, as they could touch the
lease state in turn while a call to the tables was on its way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from consumer.leases.machine.actions import (
    Announce,
    AskHandOver,
    Checkpoint,
    Conversation,
    Count,
    DealingView,
    DeleteHeartbeat,
    Done,
    Gauge,
    Get,
    GetHeartbeat,
    LeasesNotTaken,
    Note,
    Now,
    PutHeartbeat,
    Release,
    Reply,
    Request,
    RequestSteal,
    RoundObserved,
    Say,
    Scan,
    ScanWorkers,
    Take,
    Timed,
    Wake,
    advance,
)
from consumer.leases.machine.machine import LeaseMachine
from consumer.leases.store import LeaseStore
from consumer.telemetry.catalogue import log_leases_not_taken
from consumer.telemetry.metrics import Metrics
from ground.clock import Clock
from ground.threads import Threads

log = logging.getLogger("consumer.leases")

T = TypeVar("T")
LeaseListener = Callable[[Announce], None]


class MachineDriver:
    def __init__(
        self,
        machine: LeaseMachine,
        store: LeaseStore,
        clock: Clock,
        metrics: Metrics,
        threads: Threads,
        *,
        wake: Callable[[Literal["heartbeat", "taker"]], None],
        on_round: Callable[[bool | None, str | None], None] | None = None,
    ) -> None:
        self.machine = machine
        self.store = store
        self._clock = clock
        self._metrics = metrics
        self._wake = wake
        # Told as every round begins (None) and ends (its reads succeeded, why not). The heartbeat
        # file of ``consumer run --heartbeat-file`` (consumer.telemetry.health.HeartbeatFile.record).
        self._on_round = on_round
        self._lock = threading.Lock()  # around machine steps only, never across a call to the tables
        # One stopper's dealing read at a time (DealingView): held across that read, so it comes
        # from the worker's threads.
        self._dealing = threads.lock()
        self.listeners: list[LeaseListener] = []

    def now(self) -> Now:
        return Now(self._clock.monotonic_millis(), self._clock.wall_millis())

    def step(self, step: Callable[[LeaseMachine], T]) -> T:
        """One step of the machine under the lock, at the time read now; its notes performed after,
        outside the lock (before its error, if it raised)."""
        machine = self.machine
        self._lock.acquire()
        try:
            machine.tick(self.now())
            return step(machine)
        finally:
            notes = machine.notes()
            self._lock.release()
            if notes:
                self._perform(notes)

    def drive(self, begin: Callable[[LeaseMachine], Conversation[T]]) -> T:
        """Run one conversation of the machine to its end: each step under the lock, each request it
        makes performed outside it and answered."""
        begun: list[Conversation[T]] = []

        def first(machine: LeaseMachine) -> Request[Any] | Done[T]:
            begun.append(begin(machine))
            return advance(begun[0], None)

        step = self.step(first)
        while not isinstance(step, Done):
            step = self._resume(begun[0], self._answer(step))
        return step.value

    def _resume(self, conversation: Conversation[T], reply: Reply | None) -> Request[Any] | Done[T]:
        return self.step(lambda _: advance(conversation, reply))

    def _answer(self, request: Request[Any]) -> Reply:
        try:
            if isinstance(request, DealingView):
                with self._dealing:
                    return Reply(self.drive(lambda machine: machine.dealing_read(request)))
            return Reply(self._call(request))
        except BaseException as exc:  # the conversation decides; what it does not catch ends it
            return Reply(error=exc)

    def _call(self, request: Request[Any]) -> object:
        store = self.store
        if isinstance(request, Scan):
            return store.scan()
        if isinstance(request, ScanWorkers):
            return store.scan_workers()
        if isinstance(request, Get):
            return store.get(request.shard_id)
        if isinstance(request, GetHeartbeat):
            return store.get_heartbeat(request.worker_id)
        if isinstance(request, Take):
            return store.take(request.seen, request.new_owner)
        if isinstance(request, PutHeartbeat):
            return store.heartbeat(request.beat, request.expected_counter, request.clear)
        if isinstance(request, AskHandOver):
            store.ask_hand_over(request.owner, request.request)
            return None
        if isinstance(request, RequestSteal):
            return store.request_steal(request.seen, request.thief, request.at_wall_millis)
        if isinstance(request, Release):
            return store.release(request.held, request.to)
        if isinstance(request, Checkpoint):
            return store.checkpoint(request.held, request.position)
        if isinstance(request, DeleteHeartbeat):
            store.delete_heartbeat(request.beat)
            return None
        raise TypeError(f"the lease machine made a request the driver does not know: {request!r}")

    def _perform(self, notes: Sequence[Note]) -> None:
        for note in notes:
            if isinstance(note, Announce):
                self._notify(note)
            elif isinstance(note, Say):
                log.log(note.level, note.message, *note.args)
            elif isinstance(note, Count):
                self._metrics.count(note.operation, note.name, note.value)
            elif isinstance(note, Gauge):
                self._metrics.gauge(note.operation, note.name, note.value, note.unit)
            elif isinstance(note, Timed):
                self._metrics.timing(note.operation, note.name, note.millis, note.success)
            elif isinstance(note, Wake):
                self._wake(note.loop)
            elif isinstance(note, RoundObserved):
                self._observed(note.ok, note.error)
            elif isinstance(note, LeasesNotTaken):
                log_leases_not_taken(log, list(note.shard_ids), note.free_millis)

    def _notify(self, event: Announce) -> None:
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                log.exception("lease listener failed on %s %s", event.kind, event.shard_id)

    def _observed(self, ok: bool | None, error: str | None) -> None:
        if self._on_round is not None:
            try:
                self._on_round(ok, error)
            except Exception:  # an observer never stops the lease loop
                log.exception("worker %s: the round observer failed", self.machine.state.me)

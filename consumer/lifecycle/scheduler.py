"""Runs a worker's shard consumers on a small thread pool, driven by a timer heap.

A worker may hold thousands of leases; most shards are idle (waiting for their next poll) or blocked
on a parent. Each consumer is an entry in a heap keyed by the time it next wants to run; the loop
hands due consumers to ``max_worker_threads`` threads, never two steps of one consumer at once. The
lease set is reconciled every tick with what the coordinator says this worker holds: a new lease
gets a consumer, a vanished one tells its consumer the lease is lost.

A consumer that stops before its shard ends (its worker fenced itself, the lease was lost or handed
over) leaves behind what its processor finished beyond the checkpoint (:attr:`ShardConsumer.done`:
lanes run ahead of the checkpoint, which waits for the slowest). The next consumer of the shard on
this worker starts with it — after a take-back of the untouched lease, or after releasing it and
taking it again — so this worker never hands its handler a record it already finished, whoever held
the shard in between (they may replay it: that is theirs). What is kept is at most one flush's
records per shard, for the last CARRIED_SHARDS shards stopped.

A stalled shard (:mod:`consumer.lifecycle.stall_mover`) is released while its call may never
return; Python cannot stop that thread. The pool keeps as many threads again in reserve and runs at
most ``max_worker_threads`` steps of held shards at once, so such calls do not take the other
shards' threads; and this worker does not take the shard back while its call there is stuck (it
would hang a second thread on it), so a shard that hangs everywhere costs each worker one thread.

Graceful stop: every consumer is asked to shut down (finish the batch in hand, checkpoint through
its processor, release the lease); the loop keeps running until they have, or until the drain
deadline passes.

Errors: a consumer's step retries its own transient errors (see
:mod:`consumer.lifecycle.shard_consumer`), so what leaves a step is fatal by definition (a settings
error, the stream or the leases table gone) and ends :meth:`Scheduler.run`. A processor factory
that raises for a new lease, or a failing reconcile, is retried with back-off for that shard (or
the next tick): a throttle or a user's constructor never takes the worker down.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future

from consumer.leases.model import Lease
from consumer.lifecycle.failures import backoff_millis, is_fatal
from consumer.lifecycle.ports import LeaseOps, ReloadTables, StreamReader
from consumer.lifecycle.reload_pacing import ReloadBudget
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.stall_mover import StallMover
from consumer.lifecycle.states import ShutdownReason
from consumer.processing.api import ProcessorFactory
from consumer.processing.redelivery import DoneSequences
from consumer.records import ShardInfo
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.settings import WorkerSettings
from ground.threads import SYSTEM_THREADS, Event, Threads

log = logging.getLogger("consumer.lifecycle")

CARRIED_SHARDS = 4096
"""Shards whose stopped consumer's finished records are kept for the next one (the oldest dropped
first): a worker holds a few hundred shards at most, and a shard it stopped is taken back within a
few failover periods or by somebody else; dropping one only lets the next consumer replay records
from the checkpoint, as any new owner does."""
RECONCILE_MILLIS = 200
"""How often the held leases are compared with the running consumers when nothing said they changed.

A lease change the coordinator announces (taken, lost, released, finished) reconciles at once; the
period only bounds what is learnt without an announcement (a fence, a counter moved by a take-back).
Reconciling on every loop turn instead cost each poll a pass over every held lease: at 200 idle
shards that was most of an idle poll's CPU."""


class Scheduler:
    def __init__(
        self,
        *,
        leases: LeaseOps,
        reader: StreamReader,
        processor_factory: ProcessorFactory,
        settings: WorkerSettings,
        clock: Clock,
        metrics: Metrics | None = None,
        on_shard_end: Callable[[str], None] | None = None,
        threads: Threads = SYSTEM_THREADS,
        rng: random.Random | None = None,
        reload_tables: ReloadTables | None = None,
    ) -> None:
        self._leases = leases
        self._reader = reader
        self._factory = processor_factory
        self._settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._on_shard_end = on_shard_end
        self._threads = threads
        # worker.on_trimmed=reload: the tables to reload from, and one pace for all of this worker's reloads
        self._reloads = None if reload_tables is None else (reload_tables, ReloadBudget())
        # A stalled shard's call that never returns keeps its thread: the pool has as many threads
        # again in reserve, and at most ``max_worker_threads`` steps of held shards run at once, so
        # calls left behind do not take the other shards' threads (module docstring).
        self._steps_at_once = settings.max_worker_threads
        self._pool = threads.pool(2 * settings.max_worker_threads, "shard")
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, str]] = []
        self._sequence = itertools.count()
        self._consumers: dict[str, ShardConsumer] = {}
        # Steps running, per shard: the consumer and when its step began (a stalled consumer is
        # orphaned -- replaced by a new one -- while its step may still be running).
        self._in_flight: dict[str, tuple[ShardConsumer, int]] = {}
        self.stuck_calls = 0  # steps still running after the drain (run's end: see there)
        self._stalls = StallMover(
            leases=leases, settings=settings, clock=clock, metrics=self._metrics, threads=threads
        )
        leases.ask_stuck_calls(self._stalls.stuck)  # the stall mover alone counts calls left stuck
        self._ended: set[str] = set()  # shards this worker finished (SHARD_END) and still holds
        # What a stopped consumer's processor had finished beyond its checkpoint (lanes run ahead
        # of it), for the next consumer of the shard on this worker: module docstring. Oldest first.
        self._carried: dict[str, DoneSequences] = {}
        self._fatal: BaseException | None = None
        self._wake = threads.event()  # a step finished or a lease changed: look at the heap again
        self._rng = rng or random.Random()  # back-off jitter, here and (drawn from it) in each consumer
        # Shards whose processor could not be created: (failures in a row, not before this time).
        self._start_failures: dict[str, tuple[int, int]] = {}
        self._reconcile_failures = 0
        self._next_reconcile = 0
        self._changed = threads.event()  # a lease change was announced: reconcile at the next turn
        self._asked: set[str] = set()  # shards asked for since the last reconcile (step them now)
        subscribe = getattr(leases, "add_listener", None)
        if callable(subscribe):
            subscribe(self._lease_changed)

    def _lease_changed(self, event: object) -> None:
        if getattr(event, "kind", None) == "asked":
            # A hand-over asked for: the shard's consumer steps now (it hands over after the batch
            # in flight) rather than after its idle back-off, which may outlast the deadline.
            with self._lock:
                self._asked.add(str(getattr(event, "shard_id", "")))
        self._changed.set()
        self._wake.set()

    # ---------------------------------------------------------------------------- state

    def consumers(self) -> dict[str, ShardConsumer]:
        with self._lock:
            return dict(self._consumers)

    def _schedule(self, shard_id: str, due: int) -> None:
        heapq.heappush(self._heap, (due, next(self._sequence), shard_id))

    # ------------------------------------------------------------------------- reconcile

    def reconcile(self) -> None:
        """Start consumers for new leases; tell consumers whose lease vanished that it is lost."""
        held = {lease.shard_id: lease for lease in self._leases.held()}
        now = self._clock.monotonic_millis()
        with self._lock:
            self._ended &= held.keys()
            self._start_failures = {s: f for s, f in self._start_failures.items() if s in held}
            for shard_id, lease in held.items():
                if shard_id in self._consumers or shard_id in self._ended:
                    continue
                if not self._leases.may_process(shard_id):
                    continue  # held on paper but fenced: starting a consumer would only churn
                if lease.finished:
                    self._ended.add(shard_id)
                    continue
                self._start(lease, now)
            asked, self._asked = self._asked, set()
            for shard_id in asked & self._consumers.keys():
                if shard_id not in self._in_flight:
                    self._schedule(shard_id, now)
            for shard_id, consumer in self._consumers.items():
                mine = held.get(shard_id)
                later = (
                    mine is not None
                    and consumer.counter is not None
                    and not self._leases.may_process(shard_id, consumer.counter)
                )
                if (mine is None or later) and not consumer.lease_lost_signalled:
                    consumer.lease_lost()
                    self._schedule(shard_id, now)
            self._metrics.gauge("RenewAllLeases", "CurrentLeases", len(held), "Count")

    def _start(self, lease: Lease, now: int) -> None:
        """A consumer for a newly held lease; if the processor factory raises, try again later."""
        failures, not_before = self._start_failures.get(lease.shard_id, (0, now))
        if now < not_before:
            return
        try:
            consumer = self.new_consumer(lease)
        except Exception as exc:
            if is_fatal(exc):
                raise
            delay = backoff_millis(failures + 1, self._settings.task_backoff_time_millis, self._rng)
            self._start_failures[lease.shard_id] = (failures + 1, now + delay)
            log.error(
                "shard %s: creating its processor failed: %r; trying again in %d ms",
                lease.shard_id,
                exc,
                delay,
                exc_info=exc,
            )
            return
        self._start_failures.pop(lease.shard_id, None)
        self._consumers[lease.shard_id] = consumer
        self._schedule(lease.shard_id, now)

    def _carry(self, shard_id: str, done: DoneSequences) -> None:
        self._carried.pop(shard_id, None)
        self._carried[shard_id] = done
        while len(self._carried) > CARRIED_SHARDS:
            del self._carried[next(iter(self._carried))]

    def new_consumer(self, lease: Lease) -> ShardConsumer:
        """The shard consumer of a lease this worker now holds (not yet scheduled)."""
        shard = ShardInfo(lease.shard_id, tuple(sorted(lease.parent_shard_ids)))
        done = self._carried.pop(lease.shard_id, None)  # what this worker finished: module docstring
        return ShardConsumer(
            shard,
            # With its sub-sequence ("<sequence>.<sub>"): a checkpoint inside a KPL aggregate resumes
            # inside it, neither dropping its later user records nor delivering its earlier ones again.
            str(lease.checkpoint),
            leases=self._leases,
            reader=self._reader,
            processor=self._factory(shard),
            settings=self._settings,
            clock=self._clock,
            metrics=self._metrics,
            on_shard_end=self._on_shard_end,
            counter=lease.counter,
            done=done,
            threads=self._threads,
            rng=random.Random(self._rng.getrandbits(64)),
            reloads=self._reloads,
        )

    # ----------------------------------------------------------------------------- run

    def _dispatch_due(self) -> None:
        now = self._clock.monotonic_millis()
        due: list[ShardConsumer] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now and len(self._in_flight) < self._steps_at_once:
                _, _, shard_id = heapq.heappop(self._heap)
                consumer = self._consumers.get(shard_id)
                if consumer is None or shard_id in self._in_flight:
                    continue
                self._in_flight[shard_id] = (consumer, now)
                due.append(consumer)
        # Outside the lock: a future that is already done runs its callback right here.
        for consumer in due:
            future = self._pool.submit(self._stalls.stepping, consumer)
            future.add_done_callback(functools.partial(self._stepped, consumer))

    def _stepped(self, consumer: ShardConsumer, future: Future[int | None]) -> None:
        with self._lock:
            running = self._in_flight.get(consumer.shard_id)
            if running is not None and running[0] is consumer:
                del self._in_flight[consumer.shard_id]
            if self._consumers.get(consumer.shard_id) is not consumer:
                # Orphaned: found stalled and released meanwhile (StallMover); whatever it returns
                # or raises now is no longer this worker's business, and the shard may come back.
                log.warning(
                    "shard %s: the stalled call returned after its lease was released", consumer.shard_id
                )
                self._stalls.returned(consumer.shard_id)
                self._wake.set()
                return
            try:
                due = future.result()
            except BaseException as exc:  # a step raises only what ends the worker
                log.error("shard %s: fatal: %s", consumer.shard_id, exc)
                self._fatal = exc
                self._wake.set()
                return
            if due is None:
                self._consumers.pop(consumer.shard_id, None)
                if consumer.life.reason is ShutdownReason.SHARD_END:
                    self._ended.add(consumer.shard_id)
                elif consumer.done.size:
                    self._carry(consumer.shard_id, consumer.done)
            else:
                if consumer.awaiting_shutdown:
                    # Signalled while this step was in flight (its run-now entry was skipped then).
                    due = min(due, self._clock.monotonic_millis())
                self._schedule(consumer.shard_id, due)
        self._wake.set()

    def _next_wait_seconds(self, *, reconciling: bool = True) -> float:
        """Until the next consumer is due or the next reconcile, whichever comes first: a step that
        finishes and an announced lease change set the wake event, so nothing else is waited for."""
        now = self._clock.monotonic_millis()
        with self._lock:
            wait = min(self._next_reconcile - now, RECONCILE_MILLIS) if reconciling else RECONCILE_MILLIS
            if self._heap and len(self._in_flight) < self._steps_at_once:
                wait = min(wait, self._heap[0][0] - now)  # when full, a step that ends wakes the loop
        return max(wait, 0) / 1000

    def wake(self) -> None:
        """Look at the heap and the stop flag now (a stop was asked for, say)."""
        self._wake.set()

    def turn(self) -> float:
        """One turn of the loop: reconcile if due, start the steps that are due; returns how long
        (seconds) nothing needs doing unless the wake event is set meanwhile."""
        self._wake.clear()  # before looking: a wake-up from now on ends the wait that follows
        self._reconcile_when_due()
        self._move_stalled()
        self._dispatch_due()
        return self._next_wait_seconds()

    def _move_stalled(self) -> None:
        """Release the leases of stalled shards (consumer.lifecycle.stalls): their consumers are
        orphaned here, so that this worker can start a new one if it takes the lease again."""
        with self._lock:
            running = {shard: started for shard, (_, started) in self._in_flight.items()}
            consumers = dict(self._consumers)
        for shard_id in self._stalls.due(consumers, running):
            with self._lock:
                consumer = self._consumers.pop(shard_id, None)
                stuck = self._in_flight.pop(shard_id, None) is not None
            if consumer is not None:
                self._stalls.move(consumer, stuck=stuck)

    def run(self, stop: Event, drain_millis: int | None = None) -> None:
        """Process until ``stop`` is set, then drain gracefully; raises a fatal error if one occurred."""
        try:
            while not stop.is_set() and self._fatal is None:
                self._wake.wait(self.turn())
            self._drain(drain_millis if drain_millis is not None else self._settings.drain_millis)
        finally:
            # A call that never returned (a stalled shard's, or one still running past the drain)
            # cannot be stopped from Python: waiting for it would keep the worker from releasing
            # its leases, so the pool is left behind (the process exits without it: stuck_calls).
            self.stuck_calls = self._stalls.running()
            self._pool.shutdown(wait=not self.stuck_calls, cancel_futures=bool(self.stuck_calls))
        if self._fatal is not None:
            raise self._fatal

    def _reconcile_when_due(self) -> None:
        """Reconcile, but a failure (a lease store that cannot answer) is retried with back-off."""
        now = self._clock.monotonic_millis()
        if now < self._next_reconcile and not self._changed.is_set():
            return
        self._changed.clear()
        try:
            self.reconcile()
        except Exception as exc:
            if is_fatal(exc):
                log.error("fatal: %s", exc)
                self._fatal = exc
                return
            self._reconcile_failures += 1
            delay = backoff_millis(
                self._reconcile_failures, self._settings.task_backoff_time_millis, self._rng
            )
            self._next_reconcile = now + delay
            log.error(
                "reconciling the leases held failed: %r; trying again in %d ms", exc, delay, exc_info=exc
            )
            return
        self._reconcile_failures = 0
        self._next_reconcile = now + RECONCILE_MILLIS

    def _drain(self, drain_millis: int) -> None:
        with self._lock:
            consumers = list(self._consumers.values())
        log.info("graceful stop: shutting down %d shard consumers", len(consumers))
        now = self._clock.monotonic_millis()
        with self._lock:
            for consumer in consumers:
                consumer.request_shutdown()
                self._schedule(consumer.shard_id, now)
        deadline = now + drain_millis
        while self._clock.monotonic_millis() < deadline and self._fatal is None:
            with self._lock:
                if not self._consumers:
                    break
            self._wake.clear()
            self._dispatch_due()
            self._wake.wait(self._next_wait_seconds(reconciling=False))
        with self._lock:
            left = sorted(self._consumers)
        if left:
            log.warning("graceful stop: %d shard consumers did not finish in time: %s", len(left), left)

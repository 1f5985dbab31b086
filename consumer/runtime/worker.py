"""One worker, running: its assembled parts (:mod:`consumer.runtime.assembly`) started in order and
stopped in reverse.

Start: the coordinator's heartbeat and taker, shard sync's two loops (the first listing one taker
interval later, by the sync leader only: the fleet's DescribeStream budget, shard_sync.py), then the
scheduler until a stop is requested. Stopping is graceful: stop taking, let every shard
consumer finish its batch and checkpoint, release the leases, retire the heartbeat. What must be
checked before a lease is taken (settings, processor, the stream, the leases table) is checked by
whoever built the ports, before this starts (:mod:`consumer.runtime.process` for ``consumer run``).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import uuid

from consumer.leases.coordinator import LeaseCoordinator
from consumer.lifecycle.scheduler import Scheduler
from consumer.runtime.assembly import FleetFacts, Parts, Ports, assemble
from consumer.runtime.gc_tuning import tune_for_long_running
from consumer.runtime.stop_signals import StopSignals
from ground.settings import WorkerSettings

log = logging.getLogger("consumer.worker")


def new_worker_id(name: str | None = None) -> str:
    """host + pid + random: unique even when a host restarts a worker with the same pid."""
    prefix = f"{name}@" if name else ""
    return f"{prefix}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    def __init__(
        self,
        settings: WorkerSettings,
        ports: Ports,
        *,
        worker_id: str | None = None,
        description: str = "",
        tune_gc: bool = True,
        rng: random.Random | None = None,
        fleet: FleetFacts | None = None,
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id or new_worker_id()
        self.description = description  # what it reads and where it leases, for the start-up log line
        self.tune_gc = tune_gc  # consumer/runtime/gc_tuning.py; off for a worker inside another program
        self.parts: Parts = assemble(settings, ports, self.worker_id, rng=rng, fleet=fleet)
        self._metrics = ports.metrics
        self._threads = ports.threads
        self._stop = ports.threads.event()
        self._started = False

    @property
    def coordinator(self) -> LeaseCoordinator:
        return self.parts.coordinator

    @property
    def scheduler(self) -> Scheduler:
        return self.parts.scheduler

    def request_stop(self, *_: object) -> None:
        if not self._stop.is_set():
            log.info("worker %s: stop requested; draining gracefully", self.worker_id)
        self._stop.set()
        # Take nothing more while draining (a stopping worker re-took leases it had just released),
        # and let the shard-sync thread see the stop now rather than after its interval.
        if self._started:
            self.parts.coordinator.stop_taking()
            self.parts.syncer.wake()
        self.parts.scheduler.wake()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def install_signal_handlers(self) -> StopSignals:
        """SIGTERM and SIGINT request a graceful stop, from a thread of their own: request_stop wakes
        the scheduler through an event whose lock the main thread holds for a moment in every turn
        (consumer/runtime/stop_signals.py). Close what this returns to put the handlers back."""
        return StopSignals(lambda _signum: self.request_stop()).install()

    def run(self) -> None:
        coordinator, syncer, scheduler = self.parts.coordinator, self.parts.syncer, self.parts.scheduler
        log.info("worker %s starting%s", self.worker_id, f": {self.description}" if self.description else "")
        add_hook = getattr(self._metrics, "add_hook", None)
        if callable(add_hook):  # the recorder: N published at every flush while this worker leads
            add_hook(lambda _recorder: syncer.report_open_shards())
        if self.tune_gc:
            # Before the lease threads start: the collection holds the interpreter for a moment (up
            # to a second on a loaded host), and a lease taken meanwhile would wait for it before its
            # consumer starts; a rolling deploy's new workers take leases within their first second,
            # so each shard they take would pause that much longer. What lives now lives for the
            # process's life.
            tune_for_long_running()
        coordinator.start()
        self._started = True
        if self._stop.is_set():
            coordinator.stop_taking()
        first_listing = self.settings.taker_interval_millis
        sync_thread = self._threads.start("shard-sync", lambda: syncer.run(self._stop, first_listing))
        children_thread = self._threads.start("shard-children", lambda: syncer.run_children(self._stop))
        try:
            scheduler.run(self._stop, drain_millis=self.settings.drain_millis)
        finally:
            coordinator.stop_taking()
            coordinator.stop(release=True)
            syncer.wake()
            sync_thread.join(timeout=5)
            children_thread.join(timeout=5)
            if scheduler.stuck_calls:
                log.warning(
                    "worker %s: %d calls never returned (stalled shards' processors, or still running "
                    "after the drain); their threads are left behind",
                    self.worker_id,
                    scheduler.stuck_calls,
                )
            log.info("worker %s stopped", self.worker_id)

    @property
    def stuck_calls(self) -> int:
        """Calls that never returned by the end of run(): a process must exit without joining their
        threads (``consumer run`` does, after its telemetry is flushed)."""
        return self.parts.scheduler.stuck_calls

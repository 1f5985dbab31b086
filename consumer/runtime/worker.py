"""One worker process, assembled: everything `consumer run` starts, in order, and stops, in reverse.

Start-up does every check that can fail *before* taking a lease: settings, the processor (a path that
does not import, an unknown sink), the source table and its stream (missing, disabled, wrong view
type), the leases table (created if missing, its key schema checked). Then: register a heartbeat,
sync shards into leases, and run the scheduler until SIGTERM/SIGINT. Stopping is graceful: stop
taking, let every shard consumer finish its batch and checkpoint, release the leases, retire the
heartbeat, flush metrics and logs.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from types import FrameType

from consumer.clock import Clock, SystemClock
from consumer.leases.advice import capacity_advice
from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.errors import LeaseStoreUnavailableError
from consumer.lifecycle.scheduler import Scheduler
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.processing.api import ProcessorFactory
from consumer.runtime.clients import AwsClients
from consumer.runtime.gc_tuning import tune_for_long_running
from consumer.settings import Settings
from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.pacing import FleetPacer
from consumer.streams.reader import ShardReader
from consumer.streams.target import StreamTarget, resolve_stream_patiently
from consumer.telemetry.metrics import Metrics, NullMetrics

log = logging.getLogger("consumer.worker")


def new_worker_id(name: str | None = None) -> str:
    """host + pid + random: unique even when a host restarts a worker with the same pid."""
    prefix = f"{name}@" if name else ""
    return f"{prefix}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _refused(exc: BaseException) -> bool:
    """A refusal no wait cures (a permission, credentials, a bad request), as opposed to a throttle,
    a 5xx or a connection that failed."""
    cause = exc.__cause__
    code = str(getattr(cause, "response", {}).get("Error", {}).get("Code", "")) if cause is not None else ""
    return code in ("AccessDeniedException", "UnrecognizedClientException", "ValidationException")


class Worker:
    def __init__(
        self,
        settings: Settings,
        *,
        clients: AwsClients,
        processor_factory: ProcessorFactory,
        reader_factory: Callable[[str], ShardReader] | None = None,
        worker_id: str | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        tune_gc: bool = True,
        on_round: Callable[[bool, str | None], None] | None = None,
    ) -> None:
        self.settings = settings
        self.clients = clients
        self.worker_id = worker_id or new_worker_id()
        self.clock = clock or SystemClock()
        self.metrics = metrics or NullMetrics()
        self.tune_gc = tune_gc  # consumer/runtime/gc_tuning.py; off for a worker inside another program
        self._on_round = on_round  # every lease-taking round attempted (the heartbeat file)
        self._processor_factory = processor_factory
        self._reader_factory = reader_factory or self._shard_reader
        self._stop = threading.Event()
        self.target: StreamTarget | None = None
        self.coordinator: LeaseCoordinator | None = None
        self.scheduler: Scheduler | None = None
        self._syncer: ShardSyncer | None = None

    def _shard_reader(self, stream_arn: str) -> ShardReader:
        """The fast path: botocore signs and retries, the adapter parses GetRecords bodies itself;
        DescribeStream calls keep to this worker's slots of the fleet's timetable (its share of the
        account's budget, consumer.streams.pacing)."""
        pacer = FleetPacer(
            self.settings.worker.describe_stream_budget_per_second,
            self.clock,
            lambda: self.coordinator.fleet_position() if self.coordinator is not None else None,
        )
        source = DynamoDBStreamSource(
            self.clients.streams, describe_pacer=pacer, describe_client=self.clients.describe
        )
        return ShardReader(source, stream_arn)

    def _ensure_tables(self, store: DynamoDBLeaseStore, max_wait_seconds: float = 30.0) -> bool:
        """Create or check the leases and workers tables, waiting out a table that throttles or does
        not answer (doubling waits up to ``max_wait_seconds``): a worker (re)started during a
        DynamoDB brownout must wait for it, not exit and crash-loop its instance into a replacement
        that would fail the same way. A missing permission or a wrong key schema still ends it."""
        wait = 1.0
        while not self._stop.is_set():
            try:
                store.ensure_table(self.settings.worker)
                return True
            except LeaseStoreUnavailableError as exc:  # throttled, 5xx, unreachable (not missing/schema)
                if _refused(exc):
                    raise
                log.warning(
                    "worker %s: the leases tables do not answer yet (%s); retrying in %g s",
                    self.worker_id,
                    exc,
                    wait,
                )
                self.clock.sleep(wait * 1000)
                wait = min(wait * 2, max_wait_seconds)
        return False

    def request_stop(self, *_: object) -> None:
        if not self._stop.is_set():
            log.info("worker %s: stop requested; draining gracefully", self.worker_id)
        self._stop.set()
        # Take nothing more while draining (a stopping worker re-took leases it had just released),
        # and let the shard-sync thread see the stop now rather than after its interval.
        if self.coordinator is not None:
            self.coordinator.stop_taking()
        if self._syncer is not None:
            self._syncer.wake()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: FrameType | None) -> None:
            self.request_stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> None:
        settings = self.settings
        target = resolve_stream_patiently(
            self.clients.dynamodb,
            self.clients.streams,
            settings.table,
            sleep=self.clock.sleep,
            warn=lambda message: log.warning("worker %s: %s", self.worker_id, message),
            should_stop=self._stop.is_set,
        )
        if target is None:
            return  # asked to stop before the stream could be described: nothing was taken
        self.target = target
        store = DynamoDBLeaseStore(
            self.clients.leases or self.clients.dynamodb,
            settings.leases_table_name,
            workers_table_name=settings.workers_table_name,
            metrics=self.metrics,
        )
        if not self._ensure_tables(store):
            return  # asked to stop while the tables did not answer: nothing was taken
        reader = self._reader_factory(self.target.stream_arn)
        coordinator = LeaseCoordinator(
            store,
            self.worker_id,
            settings.worker,
            self.clock,
            metrics=self.metrics,
            capacity_advice=capacity_advice(settings),
            expected_workers=settings.fleet.min_instances * settings.fleet.worker_processes_per_instance,
            on_round=self._on_round,
        )
        self.coordinator = coordinator
        syncer = ShardSyncer(
            list_shards=reader.list_shards,
            list_children=reader.list_children,
            coordinator=coordinator,
            settings=settings.worker,
            clock=self.clock,
            metrics=self.metrics,
        )
        log.info(
            "worker %s starting: stream %s, leases table %s",
            self.worker_id,
            self.target.stream_arn,
            store.table_name,
        )
        add_hook = getattr(self.metrics, "add_hook", None)
        if callable(add_hook):  # the recorder: N published at every flush while this worker leads
            add_hook(lambda _recorder: syncer.report_open_shards())
        coordinator.start()
        self._syncer = syncer
        if self._stop.is_set():
            coordinator.stop_taking()
        # The first listing one taker interval after registering, by the sync leader only (the
        # fleet's DescribeStream budget: shard_sync.py).
        sync_thread = threading.Thread(
            target=syncer.run,
            args=(self._stop, settings.worker.taker_interval_millis),
            name="shard-sync",
            daemon=True,
        )
        sync_thread.start()
        children_thread = threading.Thread(
            target=syncer.run_children, args=(self._stop,), name="shard-children", daemon=True
        )
        children_thread.start()
        scheduler = Scheduler(
            leases=coordinator,
            reader=reader,
            processor_factory=self._processor_factory,
            settings=settings.worker,
            clock=self.clock,
            metrics=self.metrics,
            on_shard_end=syncer.shard_ended,
        )
        self.scheduler = scheduler
        if self.tune_gc:
            tune_for_long_running()  # start-up is done: what lives now lives for the process's life
        try:
            scheduler.run(self._stop, drain_millis=settings.worker.failover_time_millis)
        finally:
            coordinator.stop_taking()
            coordinator.stop(release=True)
            syncer.wake()
            sync_thread.join(timeout=5)
            children_thread.join(timeout=5)
            log.info("worker %s stopped", self.worker_id)

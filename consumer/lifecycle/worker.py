"""One worker process: everything `consumer run` starts, in order, and stops, in reverse.

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
from dataclasses import dataclass
from types import FrameType
from typing import Any

from consumer.clock import Clock, SystemClock
from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.lifecycle.ports import ProcessorFactory
from consumer.lifecycle.scheduler import Scheduler
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.lifecycle.stream_target import StreamTarget, resolve_stream_patiently
from consumer.settings import Settings
from consumer.telemetry.metrics import Metrics, NullMetrics

log = logging.getLogger("consumer.worker")


def new_worker_id(name: str | None = None) -> str:
    """host + pid + random: unique even when a host restarts a worker with the same pid."""
    prefix = f"{name}@" if name else ""
    return f"{prefix}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease_client_timeouts(failover_time_millis: int) -> dict[str, Any]:
    """Timeouts for the leases-table client: every attempt, with its retries, ends within one failover
    period. botocore's defaults (60 s to connect, 60 s to read) would let a heartbeat hang past the
    fence and a create planned long ago land long after it was decided (consumer.lifecycle.shard_sync
    relies on this bound)."""
    seconds = failover_time_millis / 1000
    return {
        "connect_timeout": max(0.2, seconds / 10),
        "read_timeout": max(0.5, seconds / 5),
        "retries": {"max_attempts": 3, "mode": "standard"},
    }


@dataclass
class AwsClients:
    dynamodb: Any
    streams: Any
    leases: Any = None  # the leases and workers tables' client; ``dynamodb`` when None

    @classmethod
    def from_settings(cls, settings: Settings) -> AwsClients:
        import boto3
        from botocore.config import Config

        config = Config(retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=64)
        lease_config = Config(
            max_pool_connections=16, **lease_client_timeouts(settings.worker.failover_time_millis)
        )
        session = boto3.session.Session(region_name=settings.region)
        return cls(
            dynamodb=session.client("dynamodb", endpoint_url=settings.endpoint_url, config=config),
            streams=session.client("dynamodbstreams", endpoint_url=settings.endpoint_url, config=config),
            leases=session.client("dynamodb", endpoint_url=settings.endpoint_url, config=lease_config),
        )


class Worker:
    def __init__(
        self,
        settings: Settings,
        *,
        clients: AwsClients,
        processor_factory: ProcessorFactory,
        reader_factory: Any,
        worker_id: str | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.clients = clients
        self.worker_id = worker_id or new_worker_id()
        self.clock = clock or SystemClock()
        self.metrics = metrics or NullMetrics()
        self._processor_factory = processor_factory
        self._reader_factory = reader_factory
        self._stop = threading.Event()
        self.target: StreamTarget | None = None
        self.coordinator: LeaseCoordinator | None = None
        self.scheduler: Scheduler | None = None
        self._syncer: ShardSyncer | None = None

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
        )
        store.ensure_table(settings.worker)
        reader = self._reader_factory(self.target.stream_arn)
        coordinator = LeaseCoordinator(
            store, self.worker_id, settings.worker, self.clock, metrics=self.metrics
        )
        self.coordinator = coordinator
        syncer = ShardSyncer(
            list_shards=reader.list_shards,
            list_children=getattr(reader, "list_children", None),
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
        syncer.sync()
        coordinator.start()
        self._syncer = syncer
        if self._stop.is_set():
            coordinator.stop_taking()
        sync_thread = threading.Thread(target=syncer.run, args=(self._stop,), name="shard-sync", daemon=True)
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
        try:
            scheduler.run(self._stop, drain_millis=settings.worker.failover_time_millis)
        finally:
            coordinator.stop_taking()
            coordinator.stop(release=True)
            syncer.wake()
            sync_thread.join(timeout=5)
            children_thread.join(timeout=5)
            log.info("worker %s stopped", self.worker_id)

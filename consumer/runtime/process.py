"""A worker process on AWS (or the emulator): the ports of :mod:`consumer.runtime.assembly` made of
real clients, and the order a process starts and stops in — what ``consumer run`` does.

It starts in two steps so that a mistake is one line on stderr, not buried under telemetry:
:meth:`WorkerProcess.prepare` builds the clients and the metrics, checks the processor (a path that
does not import, an unknown sink, options it does not take) and resolves the table's stream
(missing, disabled, the wrong view type), all before logging starts and before any lease;
:meth:`WorkerProcess.run` then starts logging, adopts or creates the leases tables (their key schema
checked), assembles the worker and runs it until SIGTERM/SIGINT, and flushes metrics and logs last.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.errors import LeaseError
from consumer.runtime.assembly import Ports
from consumer.runtime.clients import AwsClients
from consumer.runtime.processors import build_processor_factory
from consumer.runtime.worker import Worker
from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.errors import FatalStreamError
from consumer.streams.pacing import DESCRIBE_STREAM_BURST, DESCRIBE_STREAM_CALLS_PER_SECOND, CallPacer
from consumer.streams.reader import ShardReader
from consumer.streams.target import StreamTarget, resolve_stream_patiently
from consumer.telemetry.health import HeartbeatFile, HeartbeatMetrics
from consumer.telemetry.logs import configure_logging
from consumer.telemetry.metrics import Metrics, MetricsRecorder
from consumer.telemetry.transports import transport_from_settings
from ground.clock import Clock, SystemClock
from ground.settings import Settings

log = logging.getLogger("consumer.worker")


def stream_port(clients: AwsClients, stream_arn: str, clock: Clock) -> ShardReader:
    """The fast path: botocore signs and retries, the adapter parses GetRecords bodies itself;
    listings are paced to the fleet's share of the account's DescribeStream budget."""
    pacer = CallPacer(DESCRIBE_STREAM_CALLS_PER_SECOND, clock, burst=DESCRIBE_STREAM_BURST)
    return ShardReader(DynamoDBStreamSource(clients.streams, describe_pacer=pacer), stream_arn)


@dataclass
class WorkerProcess:
    settings: Settings
    worker_id: str
    clients: AwsClients
    metrics: MetricsRecorder
    store: DynamoDBLeaseStore
    ports: Ports
    target: StreamTarget

    @classmethod
    def prepare(
        cls,
        settings: Settings,
        worker_id: str,
        *,
        heartbeat_file: Path | None = None,
        warn: Callable[[str], None] = print,
        clock: Clock | None = None,
    ) -> WorkerProcess:
        """Everything that can be wrong before a lease is taken, checked: raises
        :class:`~consumer.processing.errors.ProcessingConfigError` or
        :class:`~consumer.streams.target.StreamConfigError` naming the key or the command to fix."""
        clock = clock or SystemClock()
        clients = AwsClients.from_settings(settings)
        recorder = MetricsRecorder(
            settings, worker_id, transport_from_settings(settings, worker_id, clients.logs)
        )
        processors = build_processor_factory(settings, clients=clients.processing(), metrics=recorder)
        target = resolve_stream_patiently(
            clients.dynamodb, clients.streams, settings.table, sleep=time.sleep, warn=warn
        )
        assert target is not None  # without should_stop it waits until the stream can be described
        store = DynamoDBLeaseStore(
            clients.leases or clients.dynamodb,
            settings.leases_table_name,
            workers_table_name=settings.workers_table_name,
            metrics=recorder,  # LeaseTableConsumed*Capacity and LeaseTableThrottles: the dashboard's
        )
        # The worker's rounds also renew the heartbeat file, when one is asked for (deploy/health.py).
        metrics: Metrics = (
            HeartbeatMetrics(recorder, HeartbeatFile(heartbeat_file))
            if heartbeat_file is not None
            else recorder
        )
        ports = Ports(store, stream_port(clients, target.stream_arn, clock), processors, metrics, clock)
        return cls(settings, worker_id, clients, recorder, store, ports, target)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Log, adopt the leases tables, run the worker until it is stopped; flush telemetry last.

        Raises what ends a worker for good (:class:`~consumer.streams.errors.FatalStreamError`,
        :class:`~consumer.leases.errors.LeaseError`), after stopping gracefully.
        """
        settings = self.settings
        logging_handle = configure_logging(settings, self.worker_id, self.clients.logs)
        try:
            self.store.ensure_table(settings.worker)
            worker = Worker(
                settings.worker,
                self.ports,
                worker_id=self.worker_id,
                description=f"stream {self.target.stream_arn}, leases table {self.store.table_name}",
            )
            if install_signal_handlers:
                worker.install_signal_handlers()
            self.metrics.start()
            worker.run()
        except (FatalStreamError, LeaseError) as exc:
            log.error("worker stopped: %s", exc)
            raise
        finally:
            self.metrics.stop()
            logging_handle.close()

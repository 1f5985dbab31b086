"""A worker process on AWS (or the emulator): the ports of :mod:`consumer.runtime.assembly` made of
real clients, and the order a process starts and stops in — what ``consumer run`` does.

It starts in two steps so that a mistake is one line on stderr, not buried under telemetry:
:meth:`WorkerProcess.prepare` builds the clients and the metrics, checks the processor (a path that
does not import, an unknown sink, options it does not take) and resolves the table's stream
(missing, disabled, the wrong view type), all before logging starts and before any lease; with
several streams (``streams:``), every stream's processor first, then every stream, joined into one
stream port and one processor factory (:mod:`consumer.runtime.several_streams`);
:meth:`WorkerProcess.run` then starts logging, adopts or creates the leases tables (their key schema
checked; a table that throttles or does not answer is waited for), assembles the worker and runs it
until SIGTERM/SIGINT, and flushes metrics and logs last.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from consumer.leases.advice import capacity_advice
from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.errors import LeaseError, LeaseStoreUnavailableError
from consumer.leases.store import LeaseStore
from consumer.lifecycle.ports import ReloadTables, TableScanner
from consumer.processing.api import ProcessorFactory
from consumer.runtime.assembly import FleetFacts, Ports, StreamPort
from consumer.runtime.clients import AwsClients
from consumer.runtime.lease_scope import ConfiguredStreamsOnly
from consumer.runtime.processors import build_processor_factory
from consumer.runtime.several_streams import StreamMetrics, StreamParts, joined, naming_the_entry
from consumer.runtime.stop_signals import StopSignals
from consumer.runtime.worker import Worker
from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.errors import FatalStreamError, StreamSourceError
from consumer.streams.kinesis import KinesisStreamSource
from consumer.streams.kinesis_reader import KinesisShardReader
from consumer.streams.namespace import NamespacedStream
from consumer.streams.pacing import FleetPacer, FleetPosition
from consumer.streams.reader import ShardReader
from consumer.streams.table_scan import DynamoDBTableScanner
from consumer.streams.target import StreamConfigError, StreamTarget, resolve_stream_patiently
from consumer.telemetry.health import HeartbeatFile
from consumer.telemetry.logs import configure_logging
from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.transports import transport_from_settings
from ground.clock import Clock, SystemClock
from ground.settings import Settings, WorkerSettings

log = logging.getLogger("consumer.worker")


class PlaceInFleet:
    """The worker's place in the DescribeStream timetable, once the worker exists (the stream port
    is built before it): None until then."""

    def __init__(self) -> None:
        self.coordinator: LeaseCoordinator | None = None

    def __call__(self) -> FleetPosition | None:
        return self.coordinator.fleet_position() if self.coordinator is not None else None


def _refused(exc: BaseException) -> bool:
    """A refusal no wait cures (a permission, credentials, a bad request), as opposed to a throttle,
    a 5xx or a connection that failed."""
    cause = exc.__cause__
    code = str(getattr(cause, "response", {}).get("Error", {}).get("Code", "")) if cause is not None else ""
    return code in ("AccessDeniedException", "UnrecognizedClientException", "ValidationException")


def ensure_tables_patiently(
    store: DynamoDBLeaseStore,
    settings: WorkerSettings,
    clock: Clock,
    should_stop: Callable[[], bool],
    max_wait_seconds: float = 30.0,
) -> bool:
    """Create or check the leases and workers tables, waiting out a table that throttles or does
    not answer (doubling waits up to ``max_wait_seconds``): a worker (re)started during a DynamoDB
    brownout must wait for it, not exit and crash-loop its instance into a replacement that would
    fail the same way. A missing permission or a wrong key schema still ends it. False when a stop
    was asked for meanwhile."""
    wait = 1.0
    while not should_stop():
        try:
            store.ensure_table(settings)
            return True
        except LeaseStoreUnavailableError as exc:  # throttled, 5xx, unreachable (not missing/schema)
            if _refused(exc):
                raise
            log.warning("the leases tables do not answer yet (%s); retrying in %g s", exc, wait)
            clock.sleep(wait * 1000)
            wait = min(wait * 2, max_wait_seconds)
    return False


@dataclass
class _StreamProcessing:
    """One stream's processor, built and checked before any stream is resolved; what the stream
    tells later (its ARN for a Lambda handler's event, its namespace for the metrics) is filled in
    once it is resolved (:meth:`resolve`)."""

    settings: Settings  # the stream's view: its table and processing (Settings.per_stream)
    processors: ProcessorFactory
    metrics: StreamMetrics
    resolved: list[StreamTarget]
    namespaced: bool

    @classmethod
    def build(
        cls,
        settings: Settings,
        clients: AwsClients,
        metrics: MetricsRecorder,
        worker_id: str,
        namespaced: bool,
    ) -> _StreamProcessing:
        resolved: list[StreamTarget] = []
        # With several streams the processor's figures carry its stream (StreamMetrics).
        tagged = StreamMetrics(metrics)
        processors = build_processor_factory(
            settings,
            clients=clients.processing(),
            metrics=tagged if namespaced else metrics,
            stream_arn=lambda: resolved[0].stream_arn,
            worker_id=worker_id,
        )
        return cls(settings, processors, tagged, resolved, namespaced)

    def resolve(
        self, clients: AwsClients, source: DynamoDBStreamSource, warn: Callable[[str], None], clock: Clock
    ) -> StreamParts:
        if self.settings.source.is_kinesis:
            return self._resolve_kinesis(clients, clock)
        target = resolve_stream_patiently(
            clients.dynamodb, clients.streams, self.settings.table, sleep=time.sleep, warn=warn
        )
        assert target is not None  # without should_stop it waits until the stream can be described
        self.resolved.append(target)
        reader = ShardReader(
            source,
            target.stream_arn,
            convert_images=self.settings.processing.convert_images == "on_fetch",
        )
        if not self.namespaced:  # one table: plain lease keys, as the Java KCL writes them
            return StreamParts(target, reader, self.processors)
        stream = NamespacedStream(reader, target.table_name)
        self.metrics.prefix = stream.prefix
        return StreamParts(target, reader, self.processors, stream)

    def _resolve_kinesis(self, clients: AwsClients, clock: Clock) -> StreamParts:
        """The Kinesis data stream of ``source:``: described once (a missing stream is one line
        naming it), read through :class:`KinesisShardReader`. Its lease keys are the Java KCL's: the
        shard id alone, or with several streams ``<account>:<stream>:<creation epoch>:<shard id>``."""
        stream_name = self.settings.source.kinesis_stream
        kinesis = KinesisStreamSource(clients.kinesis, clock=clock)  # the reader's clock: it paces by it
        try:
            info = kinesis.describe(stream_name)
        except StreamSourceError as exc:
            raise StreamConfigError(
                f"source: the Kinesis stream {stream_name} cannot be read ({exc}): create it, or fix "
                "source.stream_name / source.stream_arn and region:"
            ) from exc
        target = StreamTarget(info.stream_name, info.stream_arn, KINESIS_VIEW)
        self.resolved.append(target)
        reader = KinesisShardReader(kinesis, info.stream_arn, clock)
        if not self.namespaced:
            return StreamParts(target, reader, self.processors)
        stream = NamespacedStream(reader, info.stream_name, prefix=f"{info.identifier}:")
        self.metrics.prefix = stream.prefix
        return StreamParts(target, reader, self.processors, stream)


KINESIS_VIEW = "KINESIS"  # a Kinesis stream's StreamTarget.view_type: records, not a table's images
_TABLE_SINKS = ("changelog", "dynamodb_replica")


def refuse_kinesis_mismatches(settings: Settings) -> None:
    """What a Kinesis stream's records cannot go through, refused before anything starts: the sinks
    that write a table's changes, a reload (there is no table to re-read), a filter on DynamoDB's
    event names."""
    if not settings.source.is_kinesis:
        return
    processing = settings.processing
    stream = settings.source.kinesis_stream
    if processing.processor in _TABLE_SINKS:
        raise StreamConfigError(
            f"source.kind: kinesis ({stream}): processing.processor {processing.processor} writes a "
            "table's changes; give a function, class or lambda: processor for a Kinesis stream"
        )
    if settings.worker.on_trimmed == "reload":
        raise StreamConfigError(
            f"source.kind: kinesis ({stream}): worker.on_trimmed: reload re-reads a table, and a "
            "Kinesis stream has none: use fail or skip_to_trim_horizon"
        )
    if processing.filter.event_names:
        raise StreamConfigError(
            f"source.kind: kinesis ({stream}): processing.filter.event_names are DynamoDB's "
            "(INSERT, MODIFY, REMOVE); a Kinesis record has none: drop them"
        )


def _only_table(table: TableScanner, shard_id: str) -> TableScanner:
    return table


def _table_of(tables: Sequence[tuple[str, TableScanner]], shard_id: str) -> TableScanner:
    """The table of a namespaced shard id's stream (several streams: consumer/runtime/several_streams.py)."""
    for prefix, table in tables:
        if shard_id.startswith(prefix):
            return table
    raise LookupError(f"shard {shard_id} belongs to no configured stream")


@dataclass
class WorkerProcess:
    settings: Settings
    worker_id: str
    clients: AwsClients
    metrics: MetricsRecorder
    store: DynamoDBLeaseStore
    ports: Ports
    targets: tuple[StreamTarget, ...]  # one per stream, in the order of streams:
    fleet: FleetFacts
    place: PlaceInFleet
    stuck_calls: int = 0  # calls that never returned when run() ended (the caller exits without them)

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
        entries = [index if settings.several_streams else None for index in range(len(settings.per_stream()))]
        for entry, view in zip(entries, settings.per_stream(), strict=True):
            naming_the_entry(entry, partial(refuse_kinesis_mismatches, view))
        clock = clock or SystemClock()
        clients = AwsClients.from_settings(settings)
        recorder = MetricsRecorder(
            settings, worker_id, transport_from_settings(settings, worker_id, clients.logs)
        )
        place = PlaceInFleet()
        # One pacer for every stream of the process: the DescribeStream budget is the fleet's,
        # whatever the number of streams it reads.
        pacer = FleetPacer(settings.worker.describe_stream_budget_per_second, clock, place)
        source = DynamoDBStreamSource(clients.streams, describe_pacer=pacer, describe_client=clients.describe)
        # Every stream's processor is checked before any stream is resolved (a bad path is one
        # line, not a wait for a missing table), each error naming its entry of streams:.
        processing = [
            naming_the_entry(
                entry,
                partial(
                    _StreamProcessing.build, view, clients, recorder, worker_id, settings.several_streams
                ),
            )
            for entry, view in zip(entries, settings.per_stream(), strict=True)
        ]
        parts = [
            naming_the_entry(entry, partial(built.resolve, clients, source, warn, clock))
            for entry, built in zip(entries, processing, strict=True)
        ]
        targets = tuple(p.target for p in parts)
        stream: StreamPort
        processors: ProcessorFactory
        store = DynamoDBLeaseStore(
            clients.leases or clients.dynamodb,
            settings.leases_table_name,
            workers_table_name=settings.workers_table_name,
            metrics=recorder,
        )
        leases: LeaseStore = store
        # Read by a reload only (worker.on_trimmed: reload), which a Kinesis stream is refused.
        tables = [DynamoDBTableScanner(clients.dynamodb, p.target.table_name) for p in parts]
        reload_tables: ReloadTables
        if settings.several_streams:
            streams, processors = joined(parts)
            stream = streams
            leases = ConfiguredStreamsOnly(store, [s.prefix for s in streams.streams])
            by_prefix = [(s.prefix, t) for s, t in zip(streams.streams, tables, strict=True)]
            reload_tables = partial(_table_of, by_prefix)
        else:
            stream, processors = parts[0].reader, parts[0].processors
            reload_tables = partial(_only_table, tables[0])
        fleet = FleetFacts(
            capacity_advice=capacity_advice(settings),
            expected_workers=settings.fleet.min_instances * settings.fleet.worker_processes_per_instance,
            # Every lease-taking round attempted renews the heartbeat file, when one is asked for
            # (deploy/health.py reads it).
            on_round=HeartbeatFile(heartbeat_file).record if heartbeat_file is not None else None,
        )
        ports = Ports(leases, stream, processors, recorder, clock, reload_tables=reload_tables)
        return cls(settings, worker_id, clients, recorder, store, ports, targets, fleet, place)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Log, adopt the leases tables, run the worker until it is stopped; flush telemetry last.

        Raises what ends a worker for good (:class:`~consumer.streams.errors.FatalStreamError`,
        :class:`~consumer.leases.errors.LeaseError`), after stopping gracefully.
        """
        settings = self.settings
        logging_handle = configure_logging(settings, self.worker_id, self.clients.logs)
        signals: StopSignals | None = None
        try:
            worker = Worker(
                settings.worker,
                self.ports,
                worker_id=self.worker_id,
                description=(
                    f"stream{'s' if len(self.targets) > 1 else ''} "
                    f"{', '.join(t.stream_arn for t in self.targets)}, leases table {self.store.table_name}"
                ),
                fleet=self.fleet,
            )
            self.place.coordinator = worker.coordinator
            if install_signal_handlers:
                signals = worker.install_signal_handlers()
            if not ensure_tables_patiently(
                self.store, settings.worker, self.ports.clock, lambda: worker.stopping
            ):
                return  # asked to stop while the tables did not answer: nothing was taken
            self.metrics.start()
            worker.run()
            self.stuck_calls = worker.stuck_calls
        except (FatalStreamError, LeaseError) as exc:
            log.error("worker stopped: %s", exc)
            raise
        finally:
            self.metrics.stop()
            logging_handle.close()
            if signals is not None:  # kept until the flushes are done: a second SIGTERM asks nothing new
                signals.close()

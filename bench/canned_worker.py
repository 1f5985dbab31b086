"""A worker on the canned stream (:mod:`bench.canned`): what ``consumer run`` assembles, on an
in-memory leases table, the canned transport and a no-op processor, so the record path can be
measured without a network, an emulator or AWS."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.canned import REGION, STREAM_ARN, CannedStream, CannedTransport, shard_id, streams_client
from consumer.api.leases import ExtendedSequenceNumber, Lease
from consumer.api.metrics import MetricsRecorder, NullTransport
from consumer.api.worker import (
    DynamoDBStreamSource,
    InMemoryLeaseStore,
    LeaseCoordinator,
    Parts,
    Ports,
    Scheduler,
    ShardConsumer,
    ShardReader,
    ShardState,
    assemble,
    build_processor_factory,
)
from consumer.processing import Batch, ProcessorFactory
from ground.clock import SystemClock
from ground.settings import Settings


def noop(batch: Batch) -> None:
    """The no-op processor (function form): ``processing.processor: bench.canned_worker:noop``."""
    return None


def bench_settings(
    processing: dict[str, Any] | None = None, worker: dict[str, Any] | None = None
) -> Settings:
    """Default settings (KCL's worker defaults) with the no-op function-form processor."""
    return Settings.model_validate(
        {
            "application_name": "bench-record-path",
            "region": REGION,
            "table": {"name": "orders", "partition_key": {"name": "pk"}, "sort_key": {"name": "sk"}},
            "processing": {"processor": "bench.canned_worker:noop", **(processing or {})},
            "worker": worker or {},
            "metrics": {"destination": "none"},
        }
    )


@dataclass
class CannedWorker:
    """What ``consumer run`` assembles (:func:`consumer.runtime.assembly.assemble`), on an in-memory
    leases table and the canned transport: ShardReader(DynamoDBStreamSource(boto3 client)), the
    processor factory from ``build_processor_factory``, MetricsRecorder (never flushed)."""

    settings: Settings
    store: InMemoryLeaseStore
    transport: CannedTransport
    reader: ShardReader
    metrics: MetricsRecorder
    factory: ProcessorFactory
    parts: Parts

    @property
    def coordinator(self) -> LeaseCoordinator:
        return self.parts.coordinator

    @property
    def scheduler(self) -> Scheduler:
        return self.parts.scheduler

    def consumer(self, lease: Lease) -> ShardConsumer:
        """A shard consumer built as the scheduler builds one."""
        return self.parts.scheduler.new_consumer(lease)

    def ready_consumers(self) -> list[ShardConsumer]:
        """One consumer per held lease, stepped through its parents check and GetShardIterator."""
        consumers = [
            self.consumer(lease) for lease in sorted(self.coordinator.held(), key=lambda x: x.shard_id)
        ]
        for consumer in consumers:
            while consumer.life.state is not ShardState.PROCESSING:
                consumer.step()
        return consumers

    def checkpoint_of(self, shard_id: str) -> str:
        lease = self.store.get(shard_id)
        assert lease is not None
        return lease.checkpoint.sequence


def canned_worker(
    canned: CannedStream,
    leases: Sequence[int],
    settings: Settings | None = None,
    *,
    start: bool = True,
    chain: bool = False,
    wrap: Callable[[ProcessorFactory], ProcessorFactory] | None = None,
) -> CannedWorker:
    """A worker holding the leases ``shard_id(i)`` for ``i`` in ``leases`` (lease ``i`` reads canned
    shard ``i % canned.shards``), all at TRIM_HORIZON. ``start``: run the coordinator's heartbeat and
    taker threads as a worker does (needed past failover - margin, 8 s by default, or it fences itself);
    ``chain``: see :class:`CannedTransport`; ``wrap``: what the scheduler's processor factory is made
    of the settings' one (a bench that times each batch)."""
    settings = settings or bench_settings()
    worker_id = f"bench@{os.getpid()}"
    store = InMemoryLeaseStore()
    for index in leases:
        store.create_if_absent(Lease(shard_id(index), None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    metrics = MetricsRecorder(settings, worker_id, NullTransport(), sample_process=False)
    transport = CannedTransport(canned, chain=chain)
    reader = ShardReader(DynamoDBStreamSource(streams_client(transport)), STREAM_ARN)
    factory = build_processor_factory(settings, metrics=metrics)
    processors = wrap(factory) if wrap is not None else factory
    parts = assemble(settings.worker, Ports(store, reader, processors, metrics, SystemClock()), worker_id)
    if start:
        parts.coordinator.start()
    else:
        parts.coordinator.heartbeat_once()
        parts.coordinator.take_round()
    if len(parts.coordinator.held()) != len(leases):
        raise RuntimeError(f"the worker took {len(parts.coordinator.held())} of {len(leases)} leases")
    return CannedWorker(settings, store, transport, reader, metrics, factory, parts)

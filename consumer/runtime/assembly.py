"""The composition root: one worker assembled from its settings and its ports.

Everything a worker talks to outside its own threads is a port:

* the leases and workers tables (:class:`~consumer.leases.store.LeaseStore`),
* the stream (:class:`StreamPort`: list the shards, list one shard's children, read),
* the processors (``factory(shard) -> RecordProcessor``),
* the metrics (:class:`~consumer.telemetry.metrics.Metrics`), the clock and the threads
  (:mod:`ground.threads`: the scheduler's pool and wake-up; a simulation steps them on its own).

:func:`assemble` joins them into the worker's parts — the lease coordinator, shard sync and the
scheduler of the shard consumers — the same parts whatever the ports are: AWS or the emulator
(:mod:`consumer.runtime.process`, what ``consumer run`` starts), canned GetRecords answers (the
benchmarks), or the simulator's faulty twins. Nothing else constructs those parts, so a setting such
as ``worker.failover_time_millis`` reaches every decision that uses it through this one function.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.store import LeaseStore
from consumer.lifecycle.ports import ReloadTables, StreamReader
from consumer.lifecycle.scheduler import Scheduler
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.processing.api import ProcessorFactory
from consumer.streams.source import Shard
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock, SystemClock
from ground.settings import WorkerSettings
from ground.threads import SYSTEM_THREADS, Threads


class StreamPort(StreamReader, Protocol):
    """One stream, as the worker uses it (:class:`consumer.streams.reader.ShardReader` is the real one)."""

    def list_shards(self) -> Iterable[Shard]:
        """Every shard of the stream (what the sync leader plans over)."""
        ...

    def list_children(self, shard_id: str) -> Iterable[Shard]:
        """The children of one ended shard."""
        ...


@dataclass(frozen=True)
class Ports:
    leases: LeaseStore
    stream: StreamPort
    processors: ProcessorFactory
    metrics: Metrics = field(default_factory=NullMetrics)
    clock: Clock = field(default_factory=SystemClock)
    # The scheduler's pool and wake-up event (ground/threads.py); the lanes' pools come with the
    # processors, built with the same threads.
    threads: Threads = SYSTEM_THREADS
    # worker.on_trimmed=reload: the source table of each shard's stream, read by a reload.
    reload_tables: ReloadTables | None = None


@dataclass(frozen=True)
class FleetFacts:
    """What a worker knows of the fleet it runs in, beyond ``worker.*``: the advice its capacity
    warning gives (consumer.leases.advice), how many workers the group runs at its minimum (the
    fleet has not joined while fewer run), and who hears of each lease-taking round (the heartbeat
    file the instance's watchdog reads)."""

    capacity_advice: str | None = None
    expected_workers: int = 1
    on_round: Callable[[bool | None, str | None], None] | None = None


@dataclass(frozen=True)
class Parts:
    """A worker's parts, assembled and not started: the coordinator's heartbeat and taker, shard
    sync and the scheduler each run on their own thread (:class:`consumer.runtime.worker.Worker`),
    or are stepped by a test on its own clock."""

    coordinator: LeaseCoordinator
    syncer: ShardSyncer
    scheduler: Scheduler


def assemble(
    settings: WorkerSettings,
    ports: Ports,
    worker_id: str,
    *,
    rng: random.Random | None = None,
    fleet: FleetFacts | None = None,
) -> Parts:
    """The worker ``worker_id``, made of ``ports`` and tuned by ``settings`` (``worker.*``)."""
    fleet = fleet or FleetFacts()
    coordinator = LeaseCoordinator(
        ports.leases,
        worker_id,
        settings,
        ports.clock,
        metrics=ports.metrics,
        rng=rng,
        capacity_advice=fleet.capacity_advice,
        expected_workers=fleet.expected_workers,
        on_round=fleet.on_round,
        threads=ports.threads,
    )
    syncer = ShardSyncer(
        list_shards=ports.stream.list_shards,
        list_children=ports.stream.list_children,
        coordinator=coordinator,
        settings=settings,
        clock=ports.clock,
        metrics=ports.metrics,
        threads=ports.threads,
    )
    coordinator.add_listener(syncer.lease_changed)
    scheduler = Scheduler(
        leases=coordinator,
        reader=ports.stream,
        processor_factory=ports.processors,
        settings=settings,
        clock=ports.clock,
        metrics=ports.metrics,
        on_shard_end=syncer.shard_ended,
        threads=ports.threads,
        rng=None if rng is None else random.Random(rng.getrandbits(64)),
        reload_tables=_reload_tables(settings, ports),
    )
    return Parts(coordinator, syncer, scheduler)


def _reload_tables(settings: WorkerSettings, ports: Ports) -> ReloadTables | None:
    if settings.on_trimmed != "reload":
        return None
    if ports.reload_tables is None:
        raise ValueError(
            "worker.on_trimmed is reload but this worker was given no table to reload from "
            "(Ports.reload_tables): use fail or skip_to_trim_horizon here"
        )
    return ports.reload_tables

"""What a fleet history does at the end of every minute: the tables plan their capacity and publish
DynamoDB's metrics, the groups their size, every worker flushes its period (as its recorder
would), the follow jobs report, the alarms are evaluated and act, and the bill runs.
"""

from __future__ import annotations

import random
from typing import Protocol

from consumer.telemetry.metric_names import spec_for
from ground.settings import Settings
from simulation.fleet_ops.alarms import AlarmBook, MetricStore
from simulation.fleet_ops.clock import Loop
from simulation.fleet_ops.cost import Bill
from simulation.fleet_ops.environment import Sample
from simulation.fleet_ops.instance import Machine
from simulation.fleet_ops.leasing import checkpoint_writes
from simulation.fleet_ops.pipeline_jobs import Follow
from simulation.fleet_ops.stack import Stack
from simulation.fleet_ops.stream import Stream
from simulation.fleet_ops.tables import DYNAMODB, scan_read_units
from simulation.fleet_ops.workers import Surroundings, Timing, WorkerProcess


class MinuteFleet(Surroundings, Protocol):
    """What the minute's end reads and moves of a fleet history: the one is
    :class:`simulation.fleet_ops.fleet.Fleet`, which calls this module (so this module names the
    fleet by what it asks of it)."""

    settings: Settings
    rng: random.Random
    loop: Loop
    timing: Timing
    stream: Stream
    store: MetricStore
    alarms: AlarmBook
    follow: Follow | None
    group_logical: str
    bill: Bill
    change_log: bool
    stack: Stack
    by_host: dict[str, Machine]
    workers: list[WorkerProcess]
    samples: list[Sample]
    processed_minute: float
    lost_before: float
    free_since: float | None


def publish_minute(self: MinuteFleet) -> None:
    """The minute's end: capacity planned, metrics published, alarms evaluated, the bill run."""
    now = self.loop.now
    minute = self.minute(now)
    alive = [w for w in self.workers if w.alive]
    for worker in alive:  # every scan of the minute counted before DynamoDB publishes it
        worker.advance(now, self)
    leases = self.stream.lease_count()
    full_scans = len(alive) * 60 / self.timing.full_scan
    writes = checkpoint_writes(alive, self.stream, now)
    self.leases_table.plan_minute(minute, full_scans * scan_read_units(leases), writes)
    self.leases_table.charge(minute, now, writes, self.rng)
    self.workers_table.plan_minute(minute, 0.0, 0.0)
    for table in (self.leases_table, self.workers_table):
        for name, dimensions, value in table.minute_metrics(minute - 1):
            self.store.put(DYNAMODB, name, dimensions, now - 30, value)
    # The source table's writes (every record of the stream is one; items of 1 KB or less).
    source = self.settings.table.source_table_name
    self.store.put(
        DYNAMODB, "ConsumedWriteCapacityUnits", {"TableName": source}, now - 30, self.stream.load(now) * 60
    )
    for group in self.stack.groups:
        name = f"<{self.group_logical}>" if group is self.stack.current else group.name
        self.store.put(
            "AWS/AutoScaling",
            "GroupInServiceInstances",
            {"AutoScalingGroupName": name},
            now - 30,
            group.in_service(),
        )
    _flush_workers(self, now, alive, leases)
    if self.follow is not None:
        self.follow.tick(now)
        freshness = self.follow.freshness(now)
        if freshness is not None:
            self.store.put(
                self.settings.metrics_namespace,
                "LakeFreshnessSeconds",
                {"Table": self.settings.table.name},
                now - 1,
                freshness,
            )
    self.alarms.evaluate(now)
    self.store.prune(now)
    serving = sum(len(g.serving()) for g in self.stack.groups)
    emr = self.follow.billed(now - 60, now) if self.follow is not None else (0.0, 0.0)
    provisioned = (0.0, 0.0)
    for table in (self.leases_table, self.workers_table):
        provisioned = (
            provisioned[0] + (table.read_units or 0.0),
            provisioned[1] + (table.write_units or 0.0),
        )
    puts = self.stream.open_shards if self.change_log and self.processed_minute > 0 else 0.0
    self.bill.accrue(
        60.0,
        serving,
        len(alive),
        self.stream.open_shards,
        emr,
        provisioned=provisioned,
        change_log_puts=puts,
    )
    if minute % 60 == 0:
        self.bill.close_hour(now - 3_600)
    current = self.stack.current
    self.samples.append(
        Sample(
            now,
            current.desired if current else 0,
            sum(g.in_service() for g in self.stack.groups),
            self.stream.load(now),
            self.processed_minute,
            self.stream.lag(now),
            leases,
            self.stream.lost - self.lost_before,
            self.stream.backlog,
        )
    )
    self.processed_minute = 0.0
    self.lost_before = self.stream.lost


def _flush_workers(self: MinuteFleet, now: float, alive: list[WorkerProcess], leases: int) -> None:
    """Each worker's period, as its recorder flushes it (lost when its host cannot ship it)."""
    live = [w for w in alive if w.row_fresh(now)]
    leader = min((w.worker_id for w in live), default=None)
    cap = self.timing.cap
    unassigned = max(0, leases - cap * len(live)) if live else 0
    stall = self.settings.worker.stall_timeout_millis
    free_since = self.free_since
    not_taken = (
        max(0, leases - sum(w.leases for w in live))
        if stall is not None and free_since is not None and now - free_since >= stall / 1000
        else 0
    )
    for worker in alive:
        ship_period(
            self, worker, now, leader=worker.worker_id == leader, unassigned=unassigned, not_taken=not_taken
        )


def ship_period(
    self: MinuteFleet,
    worker: WorkerProcess,
    now: float,
    *,
    leader: bool,
    unassigned: int = 0,
    not_taken: int = 0,
) -> None:
    """One worker's period as its recorder flushes it: every minute, and once more when it stops
    gracefully (MetricsRecorder.stop flushes the last period); lost when its host cannot ship it."""
    namespace = self.settings.metrics_namespace
    figures = worker.flush(leader, self.stream.open_shards, unassigned, not_taken)
    if not self.by_host[worker.host].cut_off(now, "metrics"):
        for operation, name, value in figures:
            self.store.put(
                namespace,
                name,
                {"Operation": operation, "WorkerIdentifier": worker.worker_id},
                now - 1,
                value,
            )
            spec = spec_for(name)
            if spec is not None and spec.fleet:
                self.store.put(namespace, name, {"Operation": operation}, now - 1, value)

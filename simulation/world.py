"""The whole worker under the fault model: every simulated worker is the product's own
:class:`~consumer.runtime.worker.Worker`, built from simulated ports, on simulated threads and time.

Each worker process is a kernel :class:`~simulation.kernel.Group` running the product's
:class:`~consumer.runtime.worker.Worker` by its own ``run()``: every loop it starts (the lease
coordinator's heartbeat and taker, shard sync's listing and children lookups, the metrics timer and
shipper), the scheduler's pool and every shard's lanes run on the worker's
:class:`~simulation.threads.SimThreads` — no loop is copied here. The real scheduler, shard
consumers and checkpointer, the real metrics recorder, the real processors (function and class form,
lanes, windows, the failure policy with retries, bisection and dead letters, the change-log sink)
built by the product's own registry, the product's own DynamoDB lease store. The ports are the
fault model's: the leases tables' DynamoDB API (:mod:`simulation.faults`,
:mod:`simulation.dynamodb_api`), the stream (:mod:`simulation.stream`: throttles, 500s, slow calls,
expired iterators, trimmed data, splits and rollovers), S3 and the window-state table
(:mod:`simulation.sinks`: writes that land and still fail). A chaos thread pauses workers (often
past their fence), kills them, stops them gracefully and adds new ones. What the processors handled
is in the history's ledger (:mod:`simulation.processors`), what the table saw in its history; the
checker (:mod:`simulation.checker`) judges both.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.processing.window_state import InMemoryWindowStateStore
from consumer.runtime.assembly import FleetFacts, Parts, Ports
from consumer.runtime.clients import lease_client_timeouts
from consumer.runtime.processors import ProcessingClients, build_processor_factory
from consumer.runtime.worker import Worker
from consumer.streams.reader import ShardReader
from consumer.telemetry.metrics import Metrics, MetricsRecorder
from consumer.telemetry.transports import InMemoryTransport
from ground.settings import Settings
from simulation.ddb_tables import Tables
from simulation.directed import Directed, Script
from simulation.dynamodb_api import FaultyDynamoDB
from simulation.faults import Faults, FaultyStore
from simulation.kernel import Group, Kernel, pause_millis
from simulation.processors import LEDGERS, Ledger
from simulation.sinks import Bucket, FaultyS3, FaultyWindowStates, SinkFaults
from simulation.stream import (
    ARN,
    FaultyStreamSource,
    ShardSpec,
    SimStream,
    StreamFaults,
    lineage,
    with_merges,
)
from simulation.threads import SimThreads


class SimClock:
    """One host's clocks on simulated time: monotonic (counting suspends, as the product's does) and a
    wall clock off by a fixed skew."""

    def __init__(self, kernel: Kernel, skew_millis: int) -> None:
        self._kernel, self._skew = kernel, skew_millis

    def monotonic_millis(self) -> int:
        return self._kernel.now

    def wall_millis(self) -> int:
        return self._kernel.now + self._skew

    def sleep(self, millis: float) -> None:
        self._kernel.sleep(millis)


@dataclass
class SimWorker:
    """One simulated ``consumer run`` process: the product's :class:`Worker`, run by its own
    ``run()`` on the process's simulated threads, and its faulty ports."""

    name: str
    group: Group
    worker: Worker
    store: FaultyStore
    source: FaultyStreamSource
    s3: FaultyS3
    metrics: Metrics  # the real recorder, or what the history's metrics_for gave
    stopped: bool = False  # Worker.run returned: its graceful stop is over

    @property
    def parts(self) -> Parts:
        return self.worker.parts

    @property
    def coordinator(self) -> LeaseCoordinator:
        return self.worker.coordinator

    @property
    def stopping(self) -> bool:
        return self.worker.stopping


@dataclass
class Plan:
    """What a history runs and how its processors fail: the settings' processing section, the
    poison records (always fail: each must end in a dead letter) and the flaky ones."""

    processing: dict[str, Any]
    poison_share: float = 0.0
    flaky_share: float = 0.0
    flaky_max: int = 3  # failures of a flaky record, at most (never more than the retries allowed)
    slow_rate: float = 0.0
    slow_millis: int = 0
    fail_rate: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)


class World:
    def __init__(
        self,
        seed: int,
        settings: Settings,
        faults: Faults,
        *,
        plan: Plan | None = None,
        stream_faults: StreamFaults | None = None,
        sink_faults: SinkFaults | None = None,
        roots: int = 3,
        generations: int = 3,
        shards: dict[str, ShardSpec] | None = None,
        directed: tuple[Directed, ...] = (),
        metrics_for: Callable[[str], Metrics] | None = None,
        on_round_for: Callable[[str], Callable[[bool | None, str | None], None]] | None = None,
        merges: bool = False,
    ) -> None:
        self.seed = seed
        self.metrics_for = metrics_for  # a worker's metrics (by its name); the real recorder's without
        self.on_round_for = on_round_for  # who hears of a worker's lease-taking rounds (its heartbeat file)
        self.rng = random.Random(seed)
        self.kernel = Kernel(seed)
        self.settings = settings
        self.faults = faults
        self.stream_faults = stream_faults or StreamFaults()
        self.sink_faults = sink_faults or SinkFaults()
        self.plan = plan or Plan({"processor": "simulation.processors:Recorder"})
        self.table = Tables(
            self.kernel,
            {settings.leases_table_name: "leaseKey", settings.workers_table_name: "workerId"},
            settings.leases_table_name,
            page_bytes=faults.page_bytes,
        )
        self.shards = shards if shards is not None else lineage(self.rng, self.kernel.now, roots, generations)
        if merges:  # Kinesis lineage: merged shards, a child of two parents (stream.with_merges)
            self.shards = with_merges(self.shards, random.Random(f"{seed}-merges"))
        self.stream = SimStream(
            self.kernel,
            self.shards,
            random.Random(f"{seed}-stream"),
            retention_millis=self.stream_faults.retention_millis,
        )
        self.script = Script(directed, self.kernel.now)
        self.bucket = Bucket()
        self.window_states = InMemoryWindowStateStore()
        numbers = [w.sequence_number for written in self.stream.written.values() for w in written]
        drawn = random.Random(f"{seed}-records")
        poison = frozenset(n for n in numbers if drawn.random() < self.plan.poison_share)
        flaky = {
            n: drawn.randint(1, self.plan.flaky_max)
            for n in numbers
            if n not in poison and drawn.random() < self.plan.flaky_share
        }
        self.ledger = Ledger(
            self.kernel,
            self.table,
            random.Random(f"{seed}-ledger"),
            poison,
            flaky,
            self.plan.slow_rate,
            self.plan.slow_millis,
            self.plan.fail_rate,
        )
        self.ledger_id = f"history-{seed}-{id(self)}"
        self.workers: dict[str, SimWorker] = {}
        self._joined = 0
        self.chaos = Group("chaos")

    # ------------------------------------------------------------------------ workers

    def worker_settings(self, name: str, s3: FaultyS3) -> Settings:
        processing = dict(self.plan.processing)
        options = {**self.plan.options, "ledger": self.ledger_id, "worker": name}
        if processing.get("processor", "").endswith(":RecordingChangelog"):
            options["s3"] = s3
        processing["options"] = options
        return self.settings.model_copy(
            update={"processing": self.settings.processing.model_validate(processing)}
        )

    def join(self, name: str | None = None) -> SimWorker:
        self._joined += 1
        name = name or f"w{self._joined}"
        worker_settings = self.settings.worker
        skew = self.rng.randint(
            -worker_settings.max_clock_skew_millis // 2, worker_settings.max_clock_skew_millis // 2
        )
        clock = SimClock(self.kernel, skew)
        rng = random.Random(f"{self.seed}-{name}")
        group = Group(name)
        threads = SimThreads(self.kernel, group)
        # The real recorder on the process's threads, shipping to memory (what ``consumer run`` does
        # to the agent's port), unless the history reads the worker's metrics itself.
        metrics: Metrics = (
            self.metrics_for(name)
            if self.metrics_for is not None
            else MetricsRecorder(
                self.settings, name, InMemoryTransport(), clock, sample_process=False, threads=threads
            )
        )
        # The product's DynamoDB store on a client configured as consumer.runtime.clients does.
        client = FaultyDynamoDB(
            self.table,
            self.kernel,
            self.faults,
            rng,
            config=lease_client_timeouts(worker_settings.lease_call_budget_millis),
            failover_millis=worker_settings.failover_time_millis,
        )
        dynamodb = DynamoDBLeaseStore(
            client,
            self.settings.leases_table_name,
            workers_table_name=self.settings.workers_table_name,
            metrics=metrics,
        )
        store = FaultyStore(dynamodb, client, self.table, self.kernel)
        store.name, store.script = name, self.script
        source = FaultyStreamSource(self.stream, self.kernel, self.stream_faults, rng, store)
        s3 = FaultyS3(self.bucket, self.kernel, self.sink_faults, rng, name)
        clients = ProcessingClients(
            s3=s3,
            window_states=FaultyWindowStates(
                self.window_states, self.kernel, self.sink_faults, rng, script=store
            ),
        )
        processors = build_processor_factory(
            self.worker_settings(name, s3), clients=clients, clock=clock, rng=rng, threads=threads
        )
        ports = Ports(store, ShardReader(source, ARN), processors, metrics, clock, threads)
        facts = FleetFacts(on_round=self.on_round_for(name)) if self.on_round_for is not None else None
        worker = Worker(worker_settings, ports, worker_id=name, tune_gc=False, rng=rng, fleet=facts)
        store.fenced = worker.coordinator.fenced
        sim = SimWorker(name, group, worker, store, source, s3, metrics)
        self.workers[name] = sim
        self.kernel.spawn(f"{name}-main", group, lambda: self._main(sim))
        return sim

    def alive(self) -> list[SimWorker]:
        return [w for w in self.workers.values() if not w.group.crashed and not w.stopping]

    def _main(self, worker: SimWorker) -> None:
        """What ``consumer run`` does (consumer.runtime.process): metrics, then the worker until it
        is stopped, then the last metrics."""
        recorder = worker.metrics if isinstance(worker.metrics, MetricsRecorder) else None
        if recorder is not None:
            recorder.start()
        try:
            worker.worker.run()
        finally:
            worker.stopped = True
            if recorder is not None:
                recorder.stop()

    def stop_gracefully(self, worker: SimWorker) -> None:
        """SIGTERM: the worker's own handler (Worker.request_stop); its run() drains and releases."""
        worker.worker.request_stop()

    # -------------------------------------------------------------------------- chaos

    def chaos_thread(self, until: int, min_workers: int = 1) -> None:
        """Once a second: maybe pause a worker (SIGSTOP or a suspend, often past its fence), kill one,
        stop one gracefully, or add one."""
        failover = self.settings.worker.failover_time_millis
        while self.kernel.now < until:
            self.kernel.sleep(1_000)
            running = [w for w in self.alive() if w.group.paused_until <= self.kernel.now]
            roll = self.rng.random()
            if roll < 0.15 and running:
                victim = self.rng.choice(running)
                victim.group.paused_until = self.kernel.now + pause_millis(self.rng, failover)
            elif roll < 0.20 and len(self.alive()) > min_workers:
                self.rng.choice(self.alive()).group.crashed = True
            elif roll < 0.23 and len(self.alive()) > min_workers:
                self.stop_gracefully(self.rng.choice(self.alive()))
            elif roll < 0.29 or not self.alive():
                self.join()
        self.faults.active = False
        self.stream_faults.active = False
        self.sink_faults.active = False
        self.ledger.slow_rate = 0.0
        self.ledger.fail_rate = 0.0
        if not self.alive():
            self.join()

    def start(self, workers: int) -> None:
        """``workers`` workers join; the history runs as the kernel is run (close() ends it)."""
        LEDGERS[self.ledger_id] = self.ledger
        for _ in range(workers):
            self.join()

    def close(self) -> None:
        self.kernel.shutdown()
        LEDGERS.pop(self.ledger_id, None)

    def run(
        self,
        workers: int,
        chaos_millis: int,
        settle_millis: int,
        *,
        chaos: bool = True,
        director: Callable[[World], None] | None = None,
    ) -> bool:
        """Chaos for ``chaos_millis`` then calm; True when every shard finished within ``settle_millis``
        of the end of the chaos. Without ``chaos`` nothing pauses, kills or adds workers: only the
        fault model and the directed faults act — and the ``director``, if any: a simulated thread of
        the history's own (never paused) that stops, adds or kills workers at a scripted moment."""
        try:
            self.start(workers)
            end_of_chaos = self.kernel.now + chaos_millis
            if chaos:
                self.kernel.spawn("chaos", self.chaos, lambda: self.chaos_thread(end_of_chaos))
            if director is not None:
                self.kernel.spawn("director", self.chaos, lambda: director(self))
            self.kernel.run_until(end_of_chaos)
            last_close = max(spec.closes for spec in self.shards.values())
            deadline = max(self.kernel.now, last_close) + settle_millis
            self.kernel.run_until(deadline, stop=self.all_finished)
            return self.all_finished()
        finally:
            self.close()

    def all_finished(self) -> bool:
        """Every shard's lease at SHARD_END — or, for a shard trimmed away before anybody leased it,
        no lease at all (its children start: a missing parent is finished)."""
        finished = self.table.history.finished_at
        return all(
            shard in finished or (self.stream.gone(shard, self.kernel.now) and self.table.get(shard) is None)
            for shard in self.shards
        )

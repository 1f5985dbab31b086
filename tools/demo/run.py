"""`consumer demo`: the whole system on this machine, ending in a verdict.

1. start a local AWS endpoint on ``endpoint_url`` (moto's server: DynamoDB, DynamoDB Streams, S3,
   CloudWatch Logs), with the source table created from the same settings the CDK stack uses;
2. write a seeded load (puts, updates, deletes) while M ``consumer run`` processes share the stream,
   a worker joins, and the worker holding a lease is SIGKILLed — shown live;
3. stop the load, let the workers drain and stop them gracefully (SIGTERM);
4. judge: every write delivered, once, in per-item order (duplicates only from the killed worker's
   last batch), then build the table's current state with Spark, verify it against the table, and
   render the dashboard.

What the fleet stands on is set up in :mod:`tools.demo.stage`, and what is done to it while the
load runs in :mod:`tools.demo.disruptions`; this module runs the steps in order. Everything started
here is stopped in ``finally`` blocks, Ctrl-C included.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from consumer.api.aws import client_for, logs_client
from consumer.api.metrics import MetricsRecorder, transport_from_settings
from emulator.control import EmulatorControl
from ground.settings import Settings
from tools.dashboard.live import LiveDashboard
from tools.demo.chaos import ChaosAction, Schedule, schedule_plan
from tools.demo.disruptions import Disruptions, Undo
from tools.demo.events import FleetEvents
from tools.demo.fleet import LocalFleet
from tools.demo.load import PREFILL_ITEMS, LoadError, LoadGenerator
from tools.demo.observer import Observer
from tools.demo.stage import (
    DemoError,
    bootstrap_snapshot,
    create_source_table,
    prepare_workdir,
    start_local_aws,
    stop_process,
)
from tools.demo.tables import SLOW_EVERY, SLOW_PROCESSOR, demo_tables, slow_streams_config
from tools.demo.verdict import Verdict, judge, read_changelog, read_oracle
from tools.demo.view import FleetSnapshot, render

# The demo's whole surface, the stage's part included: `consumer demo` (tools/commands/demo.py) and
# bench/fleet_support.py import it from here.
__all__ = [
    "Demo",
    "DemoError",
    "DemoOutcome",
    "create_source_table",
    "prepare_workdir",
    "start_local_aws",
    "stop_process",
]


@dataclass(frozen=True)
class DemoOutcome:
    verdict: Verdict
    events: FleetEvents
    chaos: tuple[str, ...]
    # Wall-clock epoch milliseconds of the demo's t+0 (the events' "t+Ns" and the dashboard's axis).
    started_millis: int
    # Every table's verdict, by table (one entry without streams:, the same as ``verdict``).
    verdicts: tuple[tuple[str, Verdict], ...] = ()
    # What the fleet read: a table's stream ("dynamodb") or a Kinesis data stream ("kinesis": the
    # verdict then judges user records recorded by the delivery log, and names its figures so).
    source: str = "dynamodb"


class Loads:
    """Every table's load generator, run side by side for the same duration (one thread each)."""

    def __init__(self, generators: list[LoadGenerator]) -> None:
        self.generators = generators
        self.errors: list[LoadError] = []  # a generator that stopped early, and why

    @property
    def writes(self) -> int:
        return sum(g.writes for g in self.generators)

    @property
    def refused(self) -> int:
        return sum(g.refused for g in self.generators)

    def _run_one(self, generator: LoadGenerator, duration_seconds: float) -> None:
        try:
            generator.run(duration_seconds)
        except LoadError as exc:  # the demo reports it once the fleet has stopped
            self.errors.append(exc)

    def run(self, duration_seconds: float) -> int:
        threads = [
            threading.Thread(target=self._run_one, args=(g, duration_seconds), name=f"load-{i}", daemon=True)
            for i, g in enumerate(self.generators)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.writes


class Demo:
    """One run: the load, the fleet, the scripted (or chaotic) disruptions, the drain, the verdict."""

    def __init__(
        self,
        settings: Settings,
        config_dir: Path,
        workdir: Path,
        console: Console,
        chaos_seed: int | None = None,
        *,
        schedule: Schedule = "mixed",
        bootstrap: bool = True,
        live: LiveDashboard | None = None,
    ) -> None:
        if not settings.endpoint_url:
            raise DemoError(f"env {settings.env} has no endpoint_url: the demo only runs locally")
        self.settings = settings
        self.config_dir = config_dir
        self.workdir = workdir
        self.console = console
        self.chaos_seed = chaos_seed
        self.schedule: Schedule = schedule
        self.bootstrap = bootstrap
        # One table, or each of streams: with its own load, change log and verdict (tables.py).
        self.tables = demo_tables(settings, workdir)
        self.changelog, self.oracle = self.tables[0].changelog, self.tables[0].oracle
        if len(self.tables) > 1 and bootstrap:
            raise DemoError(
                "the Spark steps build one table's current state, and this environment lists "
                f"{len(self.tables)} streams: run the demo with --skip-spark"
            )
        endpoint = settings.endpoint_url
        self.ddb = client_for(settings, "dynamodb")
        self.streams = client_for(settings, "dynamodbstreams")
        self.control = EmulatorControl(endpoint)
        self.observer = Observer(live)
        self.events = self.observer.events
        self.disruptions = Disruptions(
            settings,
            self.tables,
            self.ddb,
            self.control,
            self.events,
            note=self.observer.note,
            elapsed=self.observer.elapsed,
        )

    def _snapshot(self, fleet: LocalFleet, load: Loads) -> FleetSnapshot:
        shards: list[dict[str, Any]] = []
        for table in self.tables:
            try:
                shards += self.control.shards(table.name)
            except Exception:  # a chaos fault or a busy endpoint: the frame shows the rest
                continue
        delivered = sum(
            len({(c.shard_id, c.sequence_number) for c in read_changelog(table.changelog, table.key)})
            for table in self.tables
        )
        return self.observer.snapshot(
            fleet,
            lambda: self.ddb.scan(TableName=self.settings.leases_table_name).get("Items", []),
            writes=load.writes,
            delivered=delivered,
            shards=[{"ShardId": s["shardId"], "ParentShardId": s.get("parentShardId")} for s in shards],
            open_shards=sum(1 for s in shards if s.get("endingSequenceNumber") is None),
        )

    def _worker_environ(self) -> dict[str, str]:
        if self.chaos_seed is None or len(self.tables) > 1:  # several: in _worker_config instead
            return {}
        delay = int(1.5 * self.settings.worker.failover_time_millis)
        return {
            "CONSUMER_PROCESSING__PROCESSOR": SLOW_PROCESSOR,
            "CONSUMER_PROCESSING__OPTIONS__DESTINATION": str(self.changelog),
            "CONSUMER_PROCESSING__OPTIONS__TABLE": self.settings.table.name,
            "CONSUMER_PROCESSING__OPTIONS__DELAY_MILLIS": str(delay),
            "CONSUMER_PROCESSING__OPTIONS__EVERY": str(SLOW_EVERY),
        }

    def _worker_config(self) -> Path:
        """The workers' config directory: the demo's own, or (chaos with several streams) a copy
        whose streams run the slow changelog (tables.py)."""
        if self.chaos_seed is None or len(self.tables) == 1:
            return self.config_dir
        delay = int(1.5 * self.settings.worker.failover_time_millis)
        return slow_streams_config(self.settings, self.config_dir, self.workdir, delay)

    # ------------------------------------------------------------------ the run

    def _load_metrics(self) -> MetricsRecorder:
        """The load generator's ``TableWrites``, shipped where the workers ship their metrics."""
        name = "load-generator"
        return MetricsRecorder(
            self.settings,
            name,
            transport_from_settings(self.settings, name, logs_client(self.settings)),
            sample_process=False,
        )

    def run(self, workers: int = 3) -> DemoOutcome:
        duration = self.settings.load.duration_seconds
        if self.bootstrap:
            seeded = create_source_table(self.ddb, self.settings, prefilled=PREFILL_ITEMS)
            self.console.print(
                f"{seeded} items written before the table had a stream; bootstrapping the snapshot"
            )
            done = bootstrap_snapshot(self.settings.env, self.config_dir, self.workdir / "bootstrap.log")
            self.console.print(done, markup=False, highlight=False, soft_wrap=True)
        else:  # no snapshot to seed: the items before the stream would only be the bootstrap's part
            for table in self.tables:
                create_source_table(self.ddb, table.settings)
        load_metrics = self._load_metrics()
        load = Loads(
            [
                LoadGenerator(self.ddb, t.settings.table, t.load(i), t.oracle, metrics=load_metrics)
                for i, t in enumerate(self.tables)
            ]
        )
        writer = threading.Thread(target=load.run, args=(duration,), name="load", daemon=True)
        script = {"join": duration * 0.25, "split": duration * 0.35, "kill": duration * 0.5}
        failover_millis = self.settings.worker.failover_time_millis
        plan = (
            schedule_plan(self.schedule, self.chaos_seed, duration, failover_millis)
            if self.chaos_seed is not None
            else []
        )
        rng = random.Random(self.chaos_seed)
        undo: list[Undo] = []
        chaos_log: list[str] = []
        fleet = LocalFleet(
            self.settings.env, self._worker_config(), self.workdir / "logs", self._worker_environ()
        )
        with fleet:
            for _ in range(workers):
                fleet.start_worker()
            self.observer.start_clock()
            load_metrics.start()
            self.observer.note(
                f"started {workers} workers and the load ({self.settings.load.writes_per_second:g} writes/s"
                f" for {duration:g} s)"
                f"{f'; chaos seed {self.chaos_seed}, schedule {self.schedule}' if self.chaos_seed is not None else ''}"
            )
            writer.start()
            try:
                self._live(
                    fleet, load, writer, script=script, plan=plan, rng=rng, undo=undo, chaos_log=chaos_log
                )
            finally:
                load_metrics.stop(timeout_seconds=10)
        if load.errors:
            raise DemoError(f"the load stopped after {load.writes} writes: {load.errors[0]}")
        self.observer.read_logs(fleet)
        verdicts = tuple(
            (t.name, judge(read_oracle(t.oracle), read_changelog(t.changelog, t.key))) for t in self.tables
        )
        return DemoOutcome(
            verdicts[0][1], self.events, tuple(chaos_log), self.observer.started_millis, verdicts
        )

    def _live(
        self,
        fleet: LocalFleet,
        load: Loads,
        writer: threading.Thread,
        *,
        script: dict[str, float],
        plan: list[ChaosAction],
        rng: random.Random,
        undo: list[Undo],
        chaos_log: list[str],
    ) -> None:
        """The live view, from the load's start to the fleet's graceful stop."""
        try:
            with Live(console=self.console, refresh_per_second=2, transient=False) as live:
                while writer.is_alive():
                    elapsed = self.observer.elapsed()
                    if self.chaos_seed is not None:  # chaos: the plan only, never the script
                        while plan and elapsed >= plan[0].at_seconds:
                            action = plan.pop(0)
                            chaos_log.append(f"t+{elapsed:.0f}s {action.kind}")
                            self.disruptions.chaos(fleet, action, rng, undo)
                    else:
                        self.disruptions.scripted(fleet, script, elapsed)
                    for item in [u for u in undo if u.due <= elapsed]:
                        undo.remove(item)
                        self.disruptions.undo(fleet, item)
                    live.update(render(self._snapshot(fleet, load)))
                    time.sleep(0.5)
                for item in sorted(undo):
                    self.disruptions.undo(fleet, item)
                retried = f" ({load.refused} refused by the table and retried)" if load.refused else ""
                self.observer.note(f"load stopped after {load.writes} writes{retried}; draining")
                self.observer.drain_and_stop(live, fleet, lambda: self._snapshot(fleet, load), load.writes)
        finally:
            # Off a terminal rich prints the last frame without ending its line: end it here, so
            # what follows the live view starts on a line of its own.
            if not self.console.is_terminal:
                self.console.line()

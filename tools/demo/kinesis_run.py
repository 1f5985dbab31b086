"""`consumer demo --source kinesis`: the fleet on a Kinesis data stream of the emulator, judged from
what the load put and what the workers recorded.

1. create the stream (``source.shard_count`` shards) and start M ``consumer run`` processes whose
   processor records every user record it is handed, durably, before returning (delivery_log.py);
2. put a seeded load (kinesis_load.py: partition keys, a per-key counter, some records KPL-aggregated)
   while a worker joins, a shard splits, a lease holder is SIGKILLed and two adjacent shards merge --
   or, with a chaos seed, the table demo's chaos plan (kills, pauses, restarts, stream and table
   faults, a slow processor; its splits are the stream's) with a split and a merge on cue;
3. stop the load, let the workers drain and stop them gracefully (SIGTERM);
4. judge with verdict.judge: every acknowledged user record delivered, each partition key's records
   in the order they were put (in delivery order), and every record delivered twice said so by the
   worker that got it again and attributed to a cause (events.py), as the table demo does.

The Spark steps build a table's current state from its change log; a Kinesis stream has neither, so
the demo leaves them out. Everything started here is stopped in ``finally`` blocks.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from consumer.api.aws import client_for
from emulator.control import EmulatorControl
from ground.settings import Settings
from tools.dashboard.live import LiveDashboard
from tools.demo.chaos import ChaosAction, Schedule, schedule_plan
from tools.demo.delivery_log import HIGH_WATER
from tools.demo.disruptions import Disruptions, Undo
from tools.demo.fleet import LocalFleet
from tools.demo.kinesis_load import KinesisLoad
from tools.demo.observer import Observer
from tools.demo.reshard import Resharder
from tools.demo.run import DemoError, DemoOutcome
from tools.demo.tables import DemoTable
from tools.demo.verdict import Delivered, judge, read_oracle
from tools.demo.view import FleetSnapshot, render

DELIVERY_LOG = "tools.demo.delivery_log:DeliveryLog"
STREAM_NAME = "demo-clicks"
SHARD_COUNT = 2
# The slow processor's period under chaos: every SLOW_EVERY-th batch of a shard (one processor per
# shard) sleeps. Fewer batches reach a shard here than in the table demo, whose period is 25.
SLOW_EVERY = 8


def kinesis_overrides(shard_count: int = SHARD_COUNT) -> dict[str, str]:
    """The setting overrides that turn the demo's environment to a Kinesis source and the delivery
    log (the workers inherit them): set before the settings are read."""
    return {
        "CONSUMER_SOURCE__KIND": "kinesis",
        "CONSUMER_SOURCE__STREAM_NAME": STREAM_NAME,
        "CONSUMER_SOURCE__SHARD_COUNT": str(shard_count),
        "CONSUMER_PROCESSING__PROCESSOR": DELIVERY_LOG,
    }


def read_deliveries(directory: Path) -> list[Delivered]:
    """Every recorded delivery of every worker (delivery_log.py), as the verdict reads deliveries."""
    found: list[Delivered] = []
    for path in sorted(directory.glob("*.jsonl")):
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if not line.endswith("\n"):
                    continue  # a line being written now: read it complete next time
                row = json.loads(line)
                found.append(
                    Delivered(
                        key=row["key"],
                        event="PUT",
                        w=int(row["n"]),
                        shard_id=row["shard"],
                        sequence_number=str(row["position"]),
                        source=path.name,
                        landed_at=float(row["at"]),
                    )
                )
    return found


class KinesisDemo:
    """One run on a Kinesis stream: the load, the fleet, the disruptions, the drain, the verdict."""

    def __init__(
        self,
        settings: Settings,
        config_dir: Path,
        workdir: Path,
        console: Console,
        chaos_seed: int | None = None,
        *,
        schedule: Schedule = "mixed",
        live: LiveDashboard | None = None,
    ) -> None:
        if not settings.endpoint_url:
            raise DemoError(f"env {settings.env} has no endpoint_url: the demo only runs locally")
        if settings.source.kind != "kinesis" or not settings.source.stream_name:
            raise DemoError("the Kinesis demo needs source.kind kinesis and a source.stream_name")
        self.settings = settings
        self.config_dir = config_dir
        self.workdir = workdir
        self.console = console
        self.chaos_seed = chaos_seed
        self.schedule: Schedule = schedule
        self.stream = settings.source.stream_name
        self.deliveries = Path(str(settings.processing.options.get("destination", workdir / "deliveries")))
        self.oracle = workdir / "oracle.jsonl"
        self.ddb = client_for(settings, "dynamodb")
        self.kinesis = client_for(settings, "kinesis")
        self.observer = Observer(live)
        self.events = self.observer.events
        self._shards: list[dict[str, Any]] = []
        self.resharder = Resharder(self.kinesis, self.stream)
        table = DemoTable(settings, self.deliveries, self.oracle)
        self.disruptions = Disruptions(
            settings,
            [table],
            self.ddb,
            EmulatorControl(settings.endpoint_url),
            self.events,
            note=self.observer.note,
            elapsed=self.observer.elapsed,
        )

    def _snapshot(self, fleet: LocalFleet, load: KinesisLoad) -> FleetSnapshot:
        with contextlib.suppress(Exception):  # a chaos fault or a busy endpoint: the last listing stands
            self._shards = self.kinesis.list_shards(StreamName=self.stream)["Shards"]
        return self.observer.snapshot(
            fleet,
            lambda: self.ddb.scan(TableName=self.settings.leases_table_name).get("Items", []),
            writes=load.writes,
            delivered=len({(d.shard_id, d.sequence_number) for d in read_deliveries(self.deliveries)}),
            shards=self._shards,
            open_shards=sum(
                1 for s in self._shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]
            ),
        )

    def _worker_environ(self) -> dict[str, str]:
        environ = {"CONSUMER_PROCESSING__OPTIONS__DESTINATION": str(self.deliveries)}
        if self.chaos_seed is not None:  # the slow processor: a batch in flight past the failover time
            delay = int(1.5 * self.settings.worker.failover_time_millis)
            environ["CONSUMER_PROCESSING__OPTIONS__DELAY_MILLIS"] = str(delay)
            environ["CONSUMER_PROCESSING__OPTIONS__EVERY"] = str(SLOW_EVERY)
        return environ

    def _create_stream(self) -> None:
        self.kinesis.create_stream(StreamName=self.stream, ShardCount=self.settings.source.shard_count)
        self.resharder.wait_active()
        (self.deliveries / HIGH_WATER).mkdir(parents=True, exist_ok=True)

    def run(self, workers: int = 3) -> DemoOutcome:
        duration = self.settings.load.duration_seconds
        self._create_stream()
        self.console.print(
            f"Kinesis stream {self.stream} with {self.settings.source.shard_count} shards; "
            "the Spark steps are left out: they build a DynamoDB table's current state from its "
            "change log, and a Kinesis stream has neither",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        load = KinesisLoad(self.kinesis, self.stream, self.settings.load, self.oracle)
        writer = threading.Thread(target=load.run_reporting, args=(duration,), name="load", daemon=True)
        script = {"join": duration * 0.25, "kill": duration * 0.5}
        reshards = {"split": duration * 0.35, "merge": duration * 0.65}
        plan = (
            schedule_plan(self.schedule, self.chaos_seed, duration, self.settings.worker.failover_time_millis)
            if self.chaos_seed is not None
            else []
        )
        rng = random.Random(self.chaos_seed)
        undo: list[Undo] = []
        chaos_log: list[str] = []
        with LocalFleet(
            self.settings.env, self.config_dir, self.workdir / "logs", self._worker_environ()
        ) as fleet:
            for _ in range(workers):
                fleet.start_worker()
            self.observer.start_clock()
            self.observer.note(
                f"started {workers} workers and the load ({self.settings.load.writes_per_second:g} user "
                f"records/s for {duration:g} s, some KPL-aggregated)"
                f"{f'; chaos seed {self.chaos_seed}, schedule {self.schedule}' if self.chaos_seed is not None else ''}"
            )
            writer.start()
            try:
                self._live(
                    fleet,
                    load,
                    writer,
                    script=script,
                    reshards=reshards,
                    plan=plan,
                    rng=rng,
                    undo=undo,
                    chaos_log=chaos_log,
                )
            finally:
                load.stop()
                writer.join(timeout=10)
        if load.errors:
            raise DemoError(f"the load stopped after {load.writes} user records: {load.errors[0]}")
        self.observer.read_logs(fleet)
        # Each worker's file is named by its pid: the verdict names who recorded a copy.
        names = {f"{w.pid}.jsonl": w.name for w in fleet.workers.values()}
        delivered = [
            replace(d, source=names.get(d.source, d.source)) for d in read_deliveries(self.deliveries)
        ]
        verdict = judge(read_oracle(self.oracle), delivered)
        self.observer.note(
            f"the load put {load.writes} user records ({load.aggregates} KPL aggregates, "
            f"{load.refused} puts failed past the client's own retries and were put again)"
        )
        return DemoOutcome(
            verdict,
            self.events,
            tuple(chaos_log),
            self.observer.started_millis,
            ((self.stream, verdict),),
            source="kinesis",
        )

    def _act(
        self,
        fleet: LocalFleet,
        *,
        script: dict[str, float],
        reshards: dict[str, float],
        plan: list[ChaosAction],
        rng: random.Random,
        undo: list[Undo],
        chaos_log: list[str],
    ) -> None:
        """What is due now: the chaos plan (its splits are the stream's) or the script, the
        resharding on cue either way, and the undoing of what has run its time."""
        elapsed = self.observer.elapsed()
        if self.chaos_seed is not None:
            while plan and elapsed >= plan[0].at_seconds:
                action = plan.pop(0)
                chaos_log.append(f"t+{elapsed:.0f}s {action.kind}")
                if action.kind == "split":
                    self.observer.note(self.resharder.split(rng))
                else:
                    self.disruptions.chaos(fleet, action, rng, undo)
        else:
            self.disruptions.scripted(fleet, script, elapsed)
        for kind, due in list(reshards.items()):
            if elapsed >= due:
                del reshards[kind]
                self.observer.note(self.resharder.split(rng) if kind == "split" else self.resharder.merge())
        for item in [u for u in undo if u.due <= elapsed]:
            undo.remove(item)
            self.disruptions.undo(fleet, item)

    def _live(
        self,
        fleet: LocalFleet,
        load: KinesisLoad,
        writer: threading.Thread,
        *,
        script: dict[str, float],
        reshards: dict[str, float],
        plan: list[ChaosAction],
        rng: random.Random,
        undo: list[Undo],
        chaos_log: list[str],
    ) -> None:
        """The live view, from the load's start to the fleet's graceful stop."""
        try:
            with Live(console=self.console, refresh_per_second=2, transient=False) as live:
                while writer.is_alive():
                    self._act(
                        fleet,
                        script=script,
                        reshards=reshards,
                        plan=plan,
                        rng=rng,
                        undo=undo,
                        chaos_log=chaos_log,
                    )
                    live.update(render(self._snapshot(fleet, load)))
                    time.sleep(0.5)
                for item in sorted(undo):
                    self.disruptions.undo(fleet, item)
                for kind in list(reshards):  # a load shorter than its cue: reshard before the drain
                    del reshards[kind]
                    self.observer.note(
                        self.resharder.split(rng) if kind == "split" else self.resharder.merge()
                    )
                self.observer.note(f"load stopped after {load.writes} user records; draining")
                self.observer.drain_and_stop(live, fleet, lambda: self._snapshot(fleet, load), load.writes)
        finally:
            if not self.console.is_terminal:
                self.console.line()

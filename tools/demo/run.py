"""`consumer demo`: the whole system on this machine, ending in a verdict.

1. start a local AWS endpoint on ``endpoint_url`` (moto's server: DynamoDB, DynamoDB Streams, S3,
   CloudWatch Logs), with the source table created from the same settings the CDK stack uses;
2. write a seeded load (puts, updates, deletes) while M ``consumer run`` processes share the stream,
   a worker joins, and the worker holding a lease is SIGKILLed — shown live;
3. stop the load, let the workers drain and stop them gracefully (SIGTERM);
4. judge: every write delivered, once, in per-item order (duplicates only from the killed worker's
   last batch), then build the table's current state with Spark, verify it against the table, and
   render the dashboard.

Everything started here is stopped in ``finally`` blocks, Ctrl-C included.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import sys
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
from emulator.errors import StartupError
from emulator.faults import FaultSettings
from emulator.testing import emulator_command, wait_until_ready
from emulator.testing import stop as stop_emulator
from ground.settings import Settings
from tools.dashboard.live import LiveDashboard
from tools.demo.chaos import ChaosAction, FaultValue, Schedule, schedule_plan
from tools.demo.events import FleetEvents, LogTail, in_time_order, short_shard
from tools.demo.fleet import LocalFleet
from tools.demo.load import PREFILL_ITEMS, LoadGenerator, prefill
from tools.demo.tables import SLOW_EVERY, SLOW_PROCESSOR, demo_tables, slow_streams_config
from tools.demo.verdict import Verdict, judge, read_changelog, read_oracle
from tools.demo.view import FleetSnapshot, lease_rows_from_items, render


class DemoError(Exception):
    """The demo could not run (a port in use, a process that would not start)."""


def generations(shards: list[dict[str, Any]]) -> int:
    """The longest parent chain among the listed shards (1 for a stream that never rolled over)."""
    parents = {s["ShardId"]: s.get("ParentShardId") for s in shards}
    deepest = 0
    for shard_id in parents:
        depth, current = 0, shard_id
        while current in parents and depth <= len(parents):
            depth, current = depth + 1, parents[current]
        deepest = max(deepest, depth)
    return deepest


def _port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1].split("/", 1)[0])


def start_local_aws(env: str, config_dir: Path, endpoint: str, log_path: Path) -> subprocess.Popen[bytes]:
    """The emulator (moto + the multi-shard stream engine) on ``endpoint``'s port, settings from
    ``config/<env>.yaml``'s ``emulator`` section; it exits by itself if this process dies."""
    port = _port_of(endpoint)
    if not _free(port):
        raise DemoError(
            f"port {port} (endpoint_url of env {env}) is taken by another program, perhaps another demo "
            f"or `consumer local up --env {env}`: stop it, or give the demo another port: "
            f"CONSUMER_ENDPOINT_URL=http://127.0.0.1:{_free_port()} make demo"
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [*emulator_command(env, config_dir, {"port": port}), "--exit-with-parent"]
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        wait_until_ready(server, 30.0, log_path)
    except StartupError as exc:
        stop_process(server)
        first = str(exc).splitlines()[0]
        raise DemoError(
            f"the local AWS emulator did not start on port {port}: {first} (its log: {log_path})"
        ) from exc
    return server


def _free(port: int) -> bool:
    """Nothing listens on ``port``. Connections a previous demo's emulator closed linger in TIME_WAIT
    for a minute; the emulator binds past them (SO_REUSEADDR, as every HTTP server does), so the
    probe does too: it still fails while any program listens there."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes]) -> None:
    stop_emulator(process)


def create_source_table(ddb: Any, settings: Settings, prefilled: int = 0) -> int:
    """The table, ``prefilled`` items written while it has no stream (as in a table older than the
    stream's 24 h), then its stream. Returns the items written before the stream."""
    table = settings.table
    keys = [(table.partition_key, "HASH")] + ([(table.sort_key, "RANGE")] if table.sort_key else [])
    ddb.create_table(
        TableName=table.name,
        KeySchema=[{"AttributeName": k.name, "KeyType": kind} for k, kind in keys],
        AttributeDefinitions=[{"AttributeName": k.name, "AttributeType": k.type} for k, _ in keys],
        BillingMode="PAY_PER_REQUEST",
    )
    written = prefill(ddb, table, prefilled) if prefilled else 0
    ddb.update_table(
        TableName=table.name,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": table.stream_view_type},
    )
    return written


def bootstrap_snapshot(env: str, config_dir: Path, log_path: Path) -> str:
    """``consumer pipeline bootstrap``: the snapshot's base from a parallel scan of the table, taken
    before the load starts (so every change after it is in the change log). Returns its last line."""
    command = [sys.executable, "-m", "tools.cli", "pipeline", "bootstrap", "--env", env]
    run = subprocess.run(
        [*command, "--config-dir", str(config_dir)], capture_output=True, text=True, timeout=600, check=False
    )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(run.stdout + run.stderr, encoding="utf-8")
    if run.returncode != 0:
        raise DemoError(f"consumer pipeline bootstrap failed (exit {run.returncode}; see {log_path})")
    lines = [line for line in run.stdout.splitlines() if line.startswith("[bootstrap]")]
    return lines[-1] if lines else run.stdout.strip().splitlines()[-1]


@dataclass(frozen=True, order=True)
class Undo:
    """Something a chaos action does later: resume a frozen worker (``resume:<name>``) or put the
    fault settings ``names`` back to their baseline (``what`` is the action's kind)."""

    due: float
    what: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class DemoOutcome:
    verdict: Verdict
    events: FleetEvents
    chaos: tuple[str, ...]
    # Wall-clock epoch milliseconds of the demo's t+0 (the events' "t+Ns" and the dashboard's axis).
    started_millis: int
    # Every table's verdict, by table (one entry without streams:, the same as ``verdict``).
    verdicts: tuple[tuple[str, Verdict], ...] = ()


class Loads:
    """Every table's load generator, run side by side for the same duration (one thread each)."""

    def __init__(self, generators: list[LoadGenerator]) -> None:
        self.generators = generators

    @property
    def writes(self) -> int:
        return sum(g.writes for g in self.generators)

    def run(self, duration_seconds: float) -> int:
        threads = [
            threading.Thread(target=g.run, args=(duration_seconds,), name=f"load-{i}", daemon=True)
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
        self.live = live  # the live dashboard, whose time axis starts with the load
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
        self.events = FleetEvents()
        self._tail = LogTail()
        self._started = time.monotonic()
        self._started_millis = time.time_ns() // 1_000_000

    # ------------------------------------------------------------------ observing

    def _elapsed(self) -> float:
        return time.monotonic() - self._started

    def _note(self, text: str) -> None:
        self.events.events.append(f"t+{self._elapsed():.0f}s {text}")

    def _read_logs(self, fleet: LocalFleet) -> None:
        stamp = f"t+{self._elapsed():.0f}s"
        for line in in_time_order(self._tail.read([w.log_path for w in fleet.workers.values()])):
            self.events.feed(line, stamp)

    def _snapshot(self, fleet: LocalFleet, load: Loads) -> FleetSnapshot:
        self._read_logs(fleet)
        try:
            items = self.ddb.scan(TableName=self.settings.leases_table_name).get("Items", [])
        except Exception:  # a chaos fault or a busy endpoint: show the last known state next time
            items = []
        shards: list[dict[str, Any]] = []
        for table in self.tables:
            try:
                shards += self.control.shards(table.name)
            except Exception:
                continue
        open_shards = sum(1 for s in shards if s.get("endingSequenceNumber") is None)
        delivered = sum(
            len({(c.shard_id, c.sequence_number) for c in read_changelog(table.changelog, table.key)})
            for table in self.tables
        )
        elapsed = self._elapsed()
        states = {}
        for name, process in fleet.workers.items():
            if process.alive:
                states[name] = "paused" if process.paused else "running"
            else:
                states[name] = "killed" if process.stopped_how == "SIGKILL" else "stopped"
        return FleetSnapshot(
            elapsed_seconds=elapsed,
            leases=lease_rows_from_items(items),
            workers=states,
            writes=load.writes,
            delivered=delivered,
            writes_per_second=load.writes / max(elapsed, 1e-3),
            delivered_per_second=delivered / max(elapsed, 1e-3),
            lag_millis=None,
            open_shards=open_shards,
            closed_shards=len(shards) - open_shards,
            generations=generations(
                [{"ShardId": s["shardId"], "ParentShardId": s.get("parentShardId")} for s in shards]
            ),
            events=tuple(self.events.events),
        )

    def _split(self, rng: random.Random | None) -> str:
        """Split a shard of the one table, or (several streams, chaos) of one chosen by ``rng``."""
        table = rng.choice(self.tables) if rng is not None and len(self.tables) > 1 else self.tables[0]
        children = self.control.split(table.name)
        where = f" of {table.name}" if len(self.tables) > 1 else ""
        return f"split{where}: children {', '.join(short_shard(c) for c in children)}"

    def _holder(self, fleet: LocalFleet) -> str | None:
        """A worker that holds a lease now (the one the script kills), or None when none does yet."""
        try:
            items = self.ddb.scan(TableName=self.settings.leases_table_name).get("Items", [])
        except self.ddb.exceptions.ResourceNotFoundException:
            return None  # no worker has created the leases table yet (a slow start): anyone will do
        owners = [
            i["leaseOwner"]["S"]
            for i in items
            if "leaseOwner" in i and not i["leaseKey"]["S"].startswith("__")
        ]
        for name in fleet.workers:
            if any(owner.startswith(f"{name}@") for owner in owners):
                return name
        return None

    # ------------------------------------------------------------------ acting

    def _start(self, fleet: LocalFleet, why: str) -> None:
        name = fleet.start_worker().name
        self._note(f"{name} started ({why})")

    def _kill(self, fleet: LocalFleet, victim: str, why: str) -> None:
        self.events.fate[victim] = "SIGKILL"
        fleet.kill(victim)
        self._note(f"SIGKILL {victim} ({why})")

    def _scripted(self, fleet: LocalFleet, script: dict[str, float], elapsed: float) -> None:
        """The plain demo: a worker joins at 25 %, a split at 35 %, a lease holder is killed at 50 %."""
        if script.get("join", 0) and elapsed >= script["join"]:
            self._start(fleet, "joins the fleet")
            script["join"] = 0
        if script.get("split", 0) and elapsed >= script["split"]:
            self._note(self._split(None).replace(": children", ": a shard closed; children", 1))
            script["split"] = 0
        if script.get("kill", 0) and elapsed >= script["kill"]:
            victim = self._holder(fleet) or next(iter(fleet.workers))
            self._kill(fleet, victim, "it held leases")
            script["kill"] = 0

    def _chaos(self, fleet: LocalFleet, action: ChaosAction, rng: random.Random, undo: list[Undo]) -> None:
        running = [w.name for w in fleet.alive() if not w.paused]
        victim = rng.choice(running) if running else None
        if action.kind == "kill" and victim:
            self._kill(fleet, victim, "chaos")
            self._start(fleet, f"replaces {victim}")
        elif action.kind == "pause" and victim:
            self._pause(fleet, action, rng, victim=victim, running=running, undo=undo)
        elif action.kind == "restart" and victim:
            self.events.fate[victim] = "SIGTERM"
            code = fleet.terminate(victim)
            self._note(f"SIGTERM {victim}: exited {code} (chaos restart)")
            self._start(fleet, f"replaces {victim}")
        elif action.kind in ("stream-faults", "table-faults"):
            changes: dict[str, FaultValue | str] = dict(action.fault_changes)
            scope = ""
            if action.scope == "leases":
                changes["table_fault_tables"] = self._leases_tables()
                scope = " (leases tables)"
            self.control.set_faults(**changes)
            undo.append(Undo(self._elapsed() + action.seconds, action.kind, tuple(action.fault_changes)))
            self._note(f"{action.kind}{scope} on for {action.seconds:g} s: {action.fault_changes}")
        elif action.kind == "split":
            self._note(self._split(rng))

    def _pause(
        self,
        fleet: LocalFleet,
        action: ChaosAction,
        rng: random.Random,
        *,
        victim: str,
        running: list[str],
        undo: list[Undo],
    ) -> None:
        """SIGSTOP ``victim`` and, for a multi-worker pause, more running workers; a pause freezes
        the last running worker only when the action asks for the whole fleet."""
        count = len(running) if action.whole_fleet else min(action.workers, len(running) - 1)
        if count < 1:
            return
        others = [name for name in running if name != victim]
        victims = [victim, *rng.sample(others, count - 1)]
        failover = self.settings.worker.failover_time_millis / 1000
        relation = "longer" if action.seconds > failover else "shorter"
        for name in victims:
            self.events.paused(name, time.time())
            fleet.pause(name)
            undo.append(Undo(self._elapsed() + action.seconds, f"resume:{name}"))
            self._note(
                f"SIGSTOP {name} for {action.seconds:.1f} s "
                f"(chaos: {action.seconds / failover:.2f} x failover, {relation} than the failover time"
                f"{'; the whole fleet' if action.whole_fleet else ''})"
            )

    def _leases_tables(self) -> str:
        """The emulator's table_fault_tables for this application's leases and workers tables."""
        leases = self.settings.leases_table_name
        workers = getattr(self.settings, "workers_table_name", None) or f"{leases}-workers"
        return f"{leases},{workers}"

    def _baseline(self, name: str) -> FaultValue:
        """What a fault setting is outside chaos: the configured stream faults, else the default."""
        configured = self.settings.emulator.faults
        value: FaultValue = (
            getattr(configured, name) if hasattr(configured, name) else getattr(FaultSettings(), name)
        )
        return value

    def _undo(self, fleet: LocalFleet, item: Undo) -> None:
        if item.what.startswith("resume:"):
            name = item.what.split(":", 1)[1]
            if fleet.workers[name].alive:
                fleet.resume(name)
                self.events.resumed(name, time.time())
                self._note(f"SIGCONT {name}")
        else:
            self.control.set_faults(**{name: self._baseline(name) for name in item.names})
            self._note(f"{item.what} off")

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
            self._started = time.monotonic()
            self._started_millis = time.time_ns() // 1_000_000
            if self.live is not None:
                self.live.start_millis = self._started_millis
            load_metrics.start()
            self._note(
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
        self._read_logs(fleet)
        verdicts = tuple(
            (t.name, judge(read_oracle(t.oracle), read_changelog(t.changelog, t.key))) for t in self.tables
        )
        return DemoOutcome(verdicts[0][1], self.events, tuple(chaos_log), self._started_millis, verdicts)

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
                    elapsed = self._elapsed()
                    if self.chaos_seed is not None:  # chaos: the plan only, never the script
                        while plan and elapsed >= plan[0].at_seconds:
                            action = plan.pop(0)
                            chaos_log.append(f"t+{elapsed:.0f}s {action.kind}")
                            self._chaos(fleet, action, rng, undo)
                    else:
                        self._scripted(fleet, script, elapsed)
                    for item in [u for u in undo if u.due <= elapsed]:
                        undo.remove(item)
                        self._undo(fleet, item)
                    live.update(render(self._snapshot(fleet, load)))
                    time.sleep(0.5)
                for item in sorted(undo):
                    self._undo(fleet, item)
                self._note(f"load stopped after {load.writes} writes; draining")
                deadline = time.monotonic() + 180
                while time.monotonic() < deadline:
                    snap = self._snapshot(fleet, load)
                    live.update(render(snap))
                    if snap.delivered >= load.writes:
                        break
                    time.sleep(0.5)
                for process in fleet.alive():
                    code = fleet.terminate(process.name)
                    self._note(f"SIGTERM {process.name}: exited {code}")
                # The last frame stays on screen; the events follow it in full, once.
                live.update(render(self._snapshot(fleet, load), events=False))
        finally:
            # Off a terminal rich prints the last frame without ending its line: end it here, so
            # what follows the live view starts on a line of its own.
            if not self.console.is_terminal:
                self.console.line()


def prepare_workdir(workdir: Path, changelog: Path) -> None:
    for path in (workdir, changelog):
        if path.exists():
            shutil.rmtree(path)
    workdir.mkdir(parents=True)

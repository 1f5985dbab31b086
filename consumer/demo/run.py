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

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from rich.console import Console
from rich.live import Live

from consumer.demo.fleet import LocalFleet
from consumer.demo.load import LoadGenerator
from consumer.demo.verdict import Verdict, judge, read_changelog, read_oracle
from consumer.demo.view import FleetSnapshot, lease_rows_from_items, render
from consumer.settings import Settings


class DemoError(Exception):
    """The demo could not run (a port in use, a process that would not start)."""


@dataclass
class Timeline:
    join_at: float
    kill_at: float
    events: list[str] = field(default_factory=list)


def _port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1].split("/", 1)[0])


def start_local_aws(endpoint: str, log_path: Path) -> subprocess.Popen[bytes]:
    port = _port_of(endpoint)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise DemoError(f"the local AWS endpoint did not start (port {port} in use?); see {log_path}")
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            return server
        except OSError:
            time.sleep(0.2)
    stop_process(server)
    raise DemoError(f"the local AWS endpoint on port {port} did not answer within 30 s")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def create_source_table(ddb: Any, settings: Settings) -> None:
    table = settings.table
    keys = [(table.partition_key, "HASH")] + ([(table.sort_key, "RANGE")] if table.sort_key else [])
    ddb.create_table(
        TableName=table.name,
        KeySchema=[{"AttributeName": k.name, "KeyType": kind} for k, kind in keys],
        AttributeDefinitions=[{"AttributeName": k.name, "AttributeType": k.type} for k, _ in keys],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": table.stream_view_type},
    )


class Demo:
    def __init__(self, settings: Settings, config_dir: Path, workdir: Path, console: Console) -> None:
        if not settings.endpoint_url:
            raise DemoError(f"env {settings.env} has no endpoint_url: the demo only runs locally")
        self.settings = settings
        self.config_dir = config_dir
        self.workdir = workdir
        self.console = console
        self.changelog = Path(str(settings.processing.options.get("destination", workdir / "changelog")))
        self.oracle = workdir / "oracle.jsonl"
        endpoint = settings.endpoint_url
        self.ddb = boto3.client("dynamodb", region_name=settings.region, endpoint_url=endpoint)
        self.streams = boto3.client("dynamodbstreams", region_name=settings.region, endpoint_url=endpoint)

    def _snapshot(
        self, started: float, fleet: LocalFleet, load: LoadGenerator, timeline: Timeline
    ) -> FleetSnapshot:
        try:
            items = self.ddb.scan(TableName=self.settings.leases_table_name).get("Items", [])
        except Exception:
            items = []
        try:
            arn = self.ddb.describe_table(TableName=self.settings.table.name)["Table"]["LatestStreamArn"]
            shards = self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        except Exception:
            shards = []
        open_shards = sum(1 for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"])
        delivered = len(
            {(c.shard_id, c.sequence_number) for c in read_changelog(self.changelog, self._key())}
        )
        elapsed = time.monotonic() - started
        states = {}
        for name, process in fleet.workers.items():
            states[name] = (
                "running" if process.alive else ("killed" if process.stopped_how == "SIGKILL" else "stopped")
            )
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
            generations=1 + max((1 for s in shards if s.get("ParentShardId")), default=0),
            events=tuple(timeline.events),
        )

    def _key(self) -> str:
        return self.settings.table.partition_key.name

    def _holder(self, fleet: LocalFleet) -> str | None:
        items = self.ddb.scan(TableName=self.settings.leases_table_name).get("Items", [])
        owners = [
            i["leaseOwner"]["S"]
            for i in items
            if "leaseOwner" in i and not i["leaseKey"]["S"].startswith("__")
        ]
        for name in fleet.workers:
            if any(owner.startswith(f"{name}@") for owner in owners):
                return name
        return None

    def run(self, workers: int = 3) -> tuple[Verdict, list[str]]:
        duration = self.settings.load.duration_seconds
        timeline = Timeline(join_at=duration * 0.25, kill_at=duration * 0.5)
        create_source_table(self.ddb, self.settings)
        load = LoadGenerator(self.ddb, self.settings.table, self.settings.load, self.oracle)
        writer = threading.Thread(target=load.run, args=(duration,), name="load", daemon=True)
        notes: list[str] = []
        with LocalFleet(self.settings.env, self.config_dir, self.workdir / "logs") as fleet:
            for _ in range(workers):
                fleet.start_worker()
            timeline.events.append(
                f"started {workers} workers and the load ({self.settings.load.writes_per_second:g} writes/s)"
            )
            started = time.monotonic()
            writer.start()
            with Live(console=self.console, refresh_per_second=2, transient=False) as live:
                while writer.is_alive():
                    elapsed = time.monotonic() - started
                    if timeline.join_at and elapsed >= timeline.join_at:
                        name = fleet.start_worker().name
                        timeline.events.append(f"t+{elapsed:.0f}s {name} joined")
                        timeline.join_at = 0
                    if timeline.kill_at and elapsed >= timeline.kill_at:
                        victim = self._holder(fleet) or next(iter(fleet.workers))
                        fleet.kill(victim)
                        timeline.events.append(f"t+{elapsed:.0f}s SIGKILL {victim} (it held a lease)")
                        notes.append(f"{victim} was SIGKILLed mid-stream")
                        timeline.kill_at = 0
                    live.update(render(self._snapshot(started, fleet, load, timeline)))
                    time.sleep(0.5)
                timeline.events.append(f"load stopped after {load.writes} writes; draining")
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    snap = self._snapshot(started, fleet, load, timeline)
                    live.update(render(snap))
                    if snap.delivered >= load.writes:
                        break
                    time.sleep(0.5)
                for process in fleet.alive():
                    code = fleet.terminate(process.name)
                    timeline.events.append(f"SIGTERM {process.name}: exited {code}")
                live.update(render(self._snapshot(started, fleet, load, timeline)))
        verdict = judge(read_oracle(self.oracle), read_changelog(self.changelog, self._key()))
        return verdict, notes


def prepare_workdir(workdir: Path, changelog: Path) -> None:
    for path in (workdir, changelog):
        if path.exists():
            shutil.rmtree(path)
    workdir.mkdir(parents=True)

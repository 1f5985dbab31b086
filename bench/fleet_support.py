"""What the fleet benchmarks share: real ``consumer run`` processes on the emulator.

:func:`bench_stack` starts the emulator with a K-partition stream, writes a config directory pointing
at it, creates the source table, and yields a :class:`Stack` whose :class:`~tools.demo.fleet.LocalFleet`
starts the workers; everything is stopped and removed on exit, whatever happened. The processor the
workers run and what it records: :mod:`bench.fleet_records`; the load: :mod:`bench.fleet_load`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.common import Ratio
from bench.fleet_load import Writer, keys_covering
from bench.fleet_records import TABLE, Delivery, DeliveryTail

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ENV = "bench"


# ----------------------------------------------------------------------------------- the stack


@dataclass
class Stack:
    name: str
    workdir: Path
    endpoint: str
    config_dir: Path
    settings: Any  # ground.settings.Settings
    fleet: Any  # tools.demo.fleet.LocalFleet
    emulator: Any  # emulator.testing.RunningEmulator
    deliveries: DeliveryTail
    changelog: Path
    partitions: int
    seed: int
    _clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.emulator.client(service)
        return self._clients[service]

    @property
    def failover_millis(self) -> int:
        return int(self.settings.worker.failover_time_millis)

    @property
    def taker_millis(self) -> int:
        return int(self.settings.worker.taker_interval_millis)

    def writer(self, rate: float, threads: int = 1, keys: list[str] | None = None) -> Writer:
        chosen = keys or keys_covering(self.partitions, self.seed)
        return Writer(lambda: self.emulator.client("dynamodb"), chosen, rate, threads)

    def keys_for(self, shard_ids: list[str]) -> list[str]:
        """The writer's key for each open shard (the emulator's true shard table names its partition)."""
        keys = keys_covering(self.partitions, self.seed)
        partition = {s["shardId"]: s["partition"] for s in self.emulator.control.shards(TABLE)}
        return [keys[partition[shard]] for shard in shard_ids if partition.get(shard) is not None]

    def snapshot(self) -> Any:
        """The leases table now (consumer.leases.model.Snapshot: leases and heartbeat rows)."""
        from consumer.api.leases import DynamoDBLeaseStore

        return DynamoDBLeaseStore(
            self.client("dynamodb"),
            self.settings.leases_table_name,
            workers_table_name=self.settings.workers_table_name,
        ).scan()

    def try_snapshot(self) -> Any | None:
        """The snapshot, or None while the leases table does not exist yet (workers create it)."""
        from consumer.api.leases import LeaseError

        try:
            return self.snapshot()
        except LeaseError:
            return None

    def live_names(self) -> set[str]:
        """Workers running and not being stopped by the benchmark."""
        return {w.name for w in self.fleet.alive() if w.stopped_how is None}

    def holdings(self, snapshot: Any | None = None) -> tuple[dict[str, list[str]], list[str]]:
        """Per live worker name, the unfinished shards it owns; and the shards nobody live owns."""
        snapshot = snapshot if snapshot is not None else self.snapshot()
        live = self.live_names()
        held: dict[str, list[str]] = {name: [] for name in live}
        orphans: list[str] = []
        for shard_id, lease in snapshot.leases.items():
            if lease.checkpoint.is_shard_end:
                continue
            owner = worker_name(lease.owner)
            if owner in live:
                held[owner].append(shard_id)
            else:
                orphans.append(shard_id)
        return held, orphans

    def wait_balanced(
        self,
        timeout: float,
        expected_leases: int | None = None,
        poll_seconds: float = 0.25,
        max_spread: int = 1,
    ) -> dict[str, list[str]]:
        """Until every lease is owned by a live worker, counts differ by at most ``max_spread`` and no
        hand-over is pending; returns the holdings. Raises TimeoutError with the last state otherwise."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_workers()
            snapshot = self.try_snapshot()
            if snapshot is None:
                time.sleep(poll_seconds)
                continue
            held, orphans = self.holdings(snapshot)
            counts = [len(v) for v in held.values()]
            pending = sum(1 for lease in snapshot.leases.values() if lease.pending_owner)
            total = sum(counts) + len(orphans)
            last = f"counts {sorted(counts)}, unowned {len(orphans)}, pending {pending}, leases {total}"
            if (
                counts
                and not orphans
                and not pending
                and max(counts) - min(counts) <= max_spread
                and (expected_leases is None or total == expected_leases)
            ):
                return held
            time.sleep(poll_seconds)
        raise TimeoutError(f"fleet not balanced after {timeout:.0f} s: {last}; logs in {self.workdir}")

    def check_workers(self) -> None:
        """Raise if a worker exited that the benchmark did not stop (with its log's tail)."""
        for process in self.fleet.workers.values():
            if not process.alive and process.stopped_how is None:
                tail = (
                    process.log_path.read_text(errors="replace")[-1500:] if process.log_path.exists() else ""
                )
                raise RuntimeError(
                    f"{process.name} exited by itself (code {process.popen.returncode}); log ends:\n{tail}"
                )

    def log_events(self, worker: str) -> list[dict[str, Any]]:
        path = self.fleet.workers[worker].log_path
        events = []
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        events.append(json.loads(line))
                    except ValueError:
                        continue
        return events

    def log_times(self, worker: str, contains: str) -> list[tuple[float, str]]:
        """(wall time, message) of the worker's log lines whose message contains ``contains``."""
        found = []
        for event in self.log_events(worker):
            message = str(event.get("message", ""))
            if contains in message:
                at = datetime.fromisoformat(str(event["timestamp"])).timestamp()
                found.append((at, message))
        return found

    def worker_id(self, name: str, timeout: float = 60) -> str:
        """The full worker id ``name`` logged at start (``worker-4@host:pid:random``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_workers()
            for event in self.log_events(name):
                message = str(event.get("message", ""))
                if message.startswith(f"worker {name}@") and " starting: " in message:
                    return message.split()[1]
            time.sleep(0.1)
        raise TimeoutError(f"{name} did not log its start within {timeout:.0f} s; logs in {self.workdir}")

    def registered_at(self, worker_id: str, timeout: float = 60) -> tuple[float, int]:
        """Wall time of the worker's first heartbeat (its row's heartbeatAt, less the renewals since
        when the row is first seen at a later counter), and the counter seen."""
        client = self.client("dynamodb")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            item = client.get_item(
                TableName=self.settings.workers_table_name,
                Key={"workerId": {"S": worker_id}},
                ConsistentRead=True,
            ).get("Item")
            if item:
                counter = int(item["heartbeatCounter"]["N"])
                at = int(item["heartbeatAt"]["N"]) / 1000
                return at - (counter - 1) * self.settings.worker.renewal_interval_millis / 1000, counter
            time.sleep(0.1)
        raise TimeoutError(f"{worker_id} never heartbeat within {timeout:.0f} s; logs in {self.workdir}")

    def lease_events(self, since: float) -> list[LeaseEvent]:
        """Every ownership change the workers logged at or after ``since``, in time order: a take
        (owner := taker), a release (owner := nobody) or a hand-over (owner := the named thief)."""
        found: list[LeaseEvent] = []
        for name in self.fleet.workers:
            for event in self.log_events(name):
                message = str(event.get("message", ""))
                at = datetime.fromisoformat(str(event["timestamp"])).timestamp()
                if at < since:
                    continue
                took = _TOOK.match(message)
                if took:
                    found.append(LeaseEvent(at, 1, took.group(2), took.group(1), "take"))
                    continue
                released = _RELEASED.match(message)
                if released:
                    to = released.group(3)
                    found.append(LeaseEvent(at, 0, released.group(2), to, "hand-over" if to else "release"))
        found.sort(key=lambda e: (e.at, e.order))
        return found

    def problems(self) -> list[str]:
        """ERROR lines and tracebacks in every worker's log (bench sanity, reported when present)."""
        found = []
        for name in self.fleet.workers:
            for event in self.log_events(name):
                if event.get("level") in ("ERROR", "CRITICAL"):
                    found.append(f"{name}: {event.get('message')}")
        return found


_TOOK = re.compile(r"^worker (\S+) took lease (\S+) from (.+)$")
_RELEASED = re.compile(r"^worker (\S+) released lease (\S+?)(?: to (\S+))?$")


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    at: float
    order: int  # a release sorts before a take logged in the same millisecond
    shard: str
    owner: str | None  # the owner after the event
    kind: str


def worker_name(owner: str | None) -> str | None:
    """``worker-3@host:pid:rand`` -> ``worker-3`` (the LocalFleet name)."""
    return owner.split("@", 1)[0] if owner else None


def config_text(
    name: str,
    endpoint: str,
    worker: dict[str, Any],
    processor_options: dict[str, Any],
    processing: dict[str, Any] | None = None,
) -> str:
    config = {
        "application_name": f"bench-{name}",
        "region": "us-east-1",
        "endpoint_url": endpoint,
        "table": {
            "name": TABLE,
            "partition_key": {"name": "pk", "type": "S"},
            "stream_view_type": "NEW_AND_OLD_IMAGES",
        },
        "worker": {"initial_position": "TRIM_HORIZON", **worker},
        "metrics": {"destination": "none"},
        "logs": {"retention_days": 1, "ship_to_cloudwatch": False},
        "processing": {
            "processor": "bench.fleet_records:RecordingChangelog",
            "options": processor_options,
            **(processing or {}),
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


@contextmanager
def bench_stack(
    name: str,
    *,
    partitions: int,
    worker: dict[str, Any],
    seed: int = 1,
    changelog: bool = True,
    emulator: dict[str, Any] | None = None,
    processing: dict[str, Any] | None = None,
) -> Iterator[Stack]:
    """Emulator + config + source table + an empty LocalFleet; all torn down on exit.

    ``processing``: more ``processing`` settings (another processor, its own options, a factor...).

    The temporary directory (worker logs, deliveries, change log) is kept when the block raises, or
    when BENCH_KEEP=1, and its path printed."""
    from emulator.testing import running_emulator
    from ground.settings import load_settings
    from tools.demo.fleet import LocalFleet
    from tools.demo.run import create_source_table

    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    keep = os.environ.get("BENCH_KEEP") == "1"
    failed = True
    try:
        with ExitStack() as stack:
            overrides = {
                "rollover_seconds": 86_400,
                "trim_after_seconds": 86_400,
                "iterator_expiry_seconds": 600,
                **(emulator or {}),
            }
            emu = stack.enter_context(
                running_emulator(
                    partitions=partitions, seed=seed, log_path=workdir / "emulator.log", **overrides
                )
            )
            config_dir = workdir / "config"
            config_dir.mkdir()
            options: dict[str, Any] = {"deliveries": str(workdir / "deliveries"), "table": TABLE}
            if changelog:
                options["destination"] = str(workdir / "changelog")
            (config_dir / f"{ENV}.yaml").write_text(
                config_text(name, emu.endpoint, worker, options, processing)
            )
            settings = load_settings(ENV, config_dir, environ={})
            create_source_table(emu.client("dynamodb"), settings)
            pythonpath = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
            fleet = stack.enter_context(
                LocalFleet(
                    ENV,
                    config_dir,
                    workdir / "logs",
                    # Dummy credentials: the emulator accepts any (as emulator.testing's clients use).
                    environ={
                        "PYTHONPATH": pythonpath,
                        "AWS_ACCESS_KEY_ID": "local",
                        "AWS_SECRET_ACCESS_KEY": "local",
                        "AWS_DEFAULT_REGION": "us-east-1",
                    },
                )
            )
            yield Stack(
                name=name,
                workdir=workdir,
                endpoint=emu.endpoint,
                config_dir=config_dir,
                settings=settings,
                fleet=fleet,
                emulator=emu,
                deliveries=DeliveryTail(workdir / "deliveries"),
                changelog=workdir / "changelog",
                partitions=partitions,
                seed=seed,
            )
        failed = False
    finally:
        if failed or keep:
            print(f"(kept {workdir}: worker logs, deliveries, change log)")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


# ------------------------------------------------------------------------------------- figures


def lost_writes(acked: dict[tuple[str, int], float], deliveries: list[Delivery]) -> list[tuple[str, int]]:
    """Acknowledged writes that never reached the processor."""
    seen = {(d.key, d.w) for d in deliveries}
    return sorted(k for k in acked if k not in seen)


def drain_lost(stack: Stack, writer: Writer, timeout_seconds: float = 30.0) -> list[tuple[str, int]]:
    """After the writer stopped: wait until every acknowledged write reached a processor, or the
    timeout; the writes still missing then."""
    deadline = time.monotonic() + timeout_seconds
    stack.deliveries.poll()
    lost = lost_writes(writer.acked, stack.deliveries.all)
    while lost and time.monotonic() < deadline:
        time.sleep(0.5)
        stack.deliveries.poll()
        lost = lost_writes(writer.acked, stack.deliveries.all)
    return lost


def lost_writes_ratio(name: str, lost: list[tuple[str, int]]) -> Ratio:
    return Ratio(
        name,
        (float(len(lost)),),
        "<=0",
        not lost,
        "acknowledged writes never delivered to a processor (whole run)",
    )

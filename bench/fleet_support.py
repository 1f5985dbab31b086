"""What the fleet benchmarks (failover, rebalance, latency) share: real processes on the emulator.

- :func:`bench_stack` starts the emulator (``emulator.testing.running_emulator``) with a K-partition
  stream, writes a config directory pointing at it, creates the source table, and yields a
  :class:`Stack` whose :class:`~tools.demo.fleet.LocalFleet` starts ``consumer run`` processes.
  Everything (workers, emulator, temporary files) is stopped / removed on exit, whatever happened.
- :class:`RecordingChangelog` is the benchmarks' processor (``processing.processor:
  bench.fleet_support:RecordingChangelog``, function form, so it runs under the product's failure
  policy and checkpointing exactly as the built-in ``changelog`` does): it appends one line per record
  delivered to it — shard, sequence number, item key and write number, the writer's timestamp, the
  arrival time and the worker's pid — to a per-process file, then lands the batch with the product's
  own changelog sink (one sink per process, as the built-in factory builds it). So a record delivered
  twice to the processor is visible even when the sink's own de-duplication hides it from the change
  log, and the change log is what a user of the product would see.
- :class:`Writer` writes a steady load, round-robin over keys chosen so that every partition (every
  open shard) gets its share; each item carries its write number ``w`` and the writer's wall-clock
  time ``t`` just before the PutItem was sent.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.common import Ratio
from consumer.processing.api import Batch, BatchResult

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TABLE = "orders"
ENV = "bench"
HASH_SPACE = 2**32


# ----------------------------------------------------------------------------- the processor

_process_lock = threading.Lock()
_delivery_fds: dict[str, int] = {}
_sinks: dict[tuple[str, str], Any] = {}


def _delivery_fd(directory: str) -> int:
    with _process_lock:
        fd = _delivery_fds.get(directory)
        if fd is None:
            Path(directory).mkdir(parents=True, exist_ok=True)
            path = Path(directory) / f"deliveries-{os.getpid()}.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _delivery_fds[directory] = fd
        return fd


def _changelog_sink(destination: str, table: str) -> Any:
    from consumer.sinks.changelog import ChangelogSink, ChangelogStore

    with _process_lock:
        sink = _sinks.get((destination, table))
        if sink is None:
            sink = ChangelogSink(ChangelogStore(destination), table)
            _sinks[(destination, table)] = sink
        return sink


def _number(image: Any, name: str) -> float | None:
    if isinstance(image, dict) and isinstance(image.get(name), dict) and "N" in image[name]:
        return float(image[name]["N"])
    return None


class RecordingChangelog:
    """Function-form processor: note every delivery (one JSON line per record), then land the batch
    in the change log with the product's sink. Options: ``deliveries`` (directory of the per-process
    files), ``destination`` (change-log directory; omit for none), ``table``."""

    def __init__(self, deliveries: str, destination: str | None = None, table: str = TABLE) -> None:
        self._fd = _delivery_fd(deliveries)
        self._sink = _changelog_sink(destination, table) if destination else None
        self._pid = os.getpid()

    def handle(self, batch: Batch) -> BatchResult | None:
        arrived = time.time()
        lines = []
        for record in batch.records:
            body = record.raw.get("dynamodb", {})
            image = body.get("NewImage") or body.get("OldImage")
            key = body.get("Keys", {}).get("pk", {}).get("S")
            lines.append(
                json.dumps(
                    {
                        "s": record.shard_id,
                        "q": record.sequence_number,
                        "k": key,
                        "w": _number(image, "w"),
                        "t": _number(image, "t"),
                        "a": arrived,
                        "p": self._pid,
                    },
                    separators=(",", ":"),
                ).encode()
                + b"\n"
            )
        if lines:
            os.write(self._fd, b"".join(lines))  # one O_APPEND write per batch: whole lines only
        if self._sink is not None:
            result: BatchResult | None = self._sink(batch)
            return result
        return None


@dataclass(frozen=True, slots=True)
class Delivery:
    shard: str
    seq: str
    key: str | None
    w: int | None
    written: float | None  # writer's wall clock just before PutItem
    arrived: float  # wall clock at the processor's entry
    pid: int


class DeliveryTail:
    """Reads the per-process delivery files incrementally (complete lines only)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}
        self.all: list[Delivery] = []

    def poll(self) -> list[Delivery]:
        new: list[Delivery] = []
        if not self.directory.is_dir():
            return new
        for path in sorted(self.directory.glob("deliveries-*.jsonl")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            end = chunk.rfind(b"\n") + 1
            if end == 0:
                continue
            self._offsets[path] = offset + end
            for line in chunk[:end].splitlines():
                d = json.loads(line)
                new.append(
                    Delivery(
                        d["s"],
                        d["q"],
                        d["k"],
                        None if d["w"] is None else int(d["w"]),
                        d["t"],
                        d["a"],
                        d["p"],
                    )
                )
        self.all.extend(new)
        return new


@dataclass(frozen=True, slots=True)
class Landed:
    shard: str
    seq: str
    landed: float


def read_landed(changelog: Path) -> list[Landed]:
    """Every line of the change log (the sink's JSON Lines objects): shard, sequence, landing time."""
    found: list[Landed] = []
    for obj in sorted(changelog.rglob("*.jsonl.gz")):
        with gzip.open(obj, "rt", encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    d = json.loads(line)
                    found.append(Landed(d["shardId"], d["sequenceNumber"], float(d["landedAt"])))
    return found


def repeated_after(copies: list[tuple[str, str, float]], start: float, end: float) -> int:
    """Extra copies of a (shard, sequence) whose later copy came in [start, end)."""
    times: dict[tuple[str, str], list[float]] = {}
    for shard, seq, at in copies:
        times.setdefault((shard, seq), []).append(at)
    extra = 0
    for stamps in times.values():
        if len(stamps) > 1:
            stamps.sort()
            extra += sum(1 for at in stamps[1:] if start <= at < end)
    return extra


# ----------------------------------------------------------------------------------- the load


def partition_of(key: str, partitions: int, seed: int) -> int:
    """The emulator partition (open shard) a partition-key string writes to (emulator.records)."""
    from emulator.records import partition_hash

    width = HASH_SPACE // partitions
    return min(partition_hash(seed, {"S": key}) // width, partitions - 1)


def keys_covering(partitions: int, seed: int) -> list[str]:
    """One key per partition, in partition order: a round-robin over them writes to every shard."""
    chosen: dict[int, str] = {}
    n = 0
    while len(chosen) < partitions:
        key = f"item-{n:06d}"
        chosen.setdefault(partition_of(key, partitions, seed), key)
        n += 1
    return [chosen[p] for p in range(partitions)]


class Writer:
    """PutItem at up to ``rate`` per second from ``threads`` threads, round-robin over ``keys``
    (slots missed while the machine was busy are skipped, not made up in a burst).

    Every write sets ``w`` (a global write number, so each write changes the item and makes one
    stream record) and ``t`` (wall clock just before the request). ``acked`` maps (key, w) to the
    wall-clock time the PutItem returned."""

    def __init__(
        self, client_factory: Callable[[], Any], keys: list[str], rate: float, threads: int = 1
    ) -> None:
        self._client_factory = client_factory
        self._keys = keys
        self.rate = rate
        self._threads_n = threads
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self._threads: list[threading.Thread] = []
        self.acked: dict[tuple[str, int], float] = {}
        self.round_trips: list[float] = []
        self.errors = 0
        self.skipped = 0
        self._extra_client: Any = None
        self.started_at = 0.0
        self.stopped_at = 0.0

    def start(self) -> Writer:
        self.started_at = time.time()
        for i in range(self._threads_n):
            thread = threading.Thread(target=self._run, args=(i,), name=f"bench-writer-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run(self, index: int) -> None:
        client = self._client_factory()
        start = time.monotonic()
        interval = self._threads_n / self.rate
        done = 0
        while not self._stop.is_set():
            due = start + (done + index / self._threads_n) * interval
            wait = due - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)
                continue
            if -wait > interval:
                # Behind by more than a slot (the machine is busy): drop the missed slots rather than
                # burst to catch up, so the offered load stays steady; ``skipped`` says how many.
                missed = int(-wait / interval)
                done += missed
                with self._lock:
                    self.skipped += missed
                continue
            with self._lock:
                w = self._next
                self._next += 1
            self._put(client, self._keys[w % len(self._keys)], w)
            done += 1

    def _put(self, client: Any, key: str, w: int) -> None:
        sent = time.time()
        try:
            client.put_item(
                TableName=TABLE,
                Item={"pk": {"S": key}, "w": {"N": str(w)}, "t": {"N": repr(sent)}},
            )
        except Exception:
            with self._lock:
                self.errors += 1
        else:
            acked = time.time()
            with self._lock:
                self.acked[(key, w)] = acked
                self.round_trips.append(acked - sent)

    def put_now(self, keys: list[str]) -> None:
        """One write per key, now, from the calling thread (counted like the steady ones)."""
        if self._extra_client is None:
            self._extra_client = self._client_factory()
        for key in keys:
            with self._lock:
                w = self._next
                self._next += 1
            self._put(self._extra_client, key, w)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self.stopped_at = time.time()

    def achieved_rate(self) -> float:
        end = self.stopped_at or time.time()
        return len(self.acked) / max(1e-9, end - self.started_at)


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
        from consumer.leases.dynamodb import DynamoDBLeaseStore

        return DynamoDBLeaseStore(
            self.client("dynamodb"),
            self.settings.leases_table_name,
            workers_table_name=self.settings.workers_table_name,
        ).scan()

    def try_snapshot(self) -> Any | None:
        """The snapshot, or None while the leases table does not exist yet (workers create it)."""
        from consumer.leases.errors import LeaseError

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
            "processor": "bench.fleet_support:RecordingChangelog",
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


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def spread(values: list[float] | tuple[float, ...], fmt: str = "{:.3f}") -> str:
    if not values:
        return "n/a"
    return (
        f"min {fmt.format(min(values))} / median {fmt.format(statistics.median(values))} / "
        f"max {fmt.format(max(values))}"
    )


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

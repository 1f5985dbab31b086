"""The processor the fleet benchmarks run (bench/fleet_support.py starts them), and what it recorded.

:class:`RecordingChangelog` is the benchmarks' processor (``processing.processor:
bench.fleet_records:RecordingChangelog``, function form, so it runs under the product's failure
policy and checkpointing exactly as the built-in ``changelog`` does): it appends one line per record
delivered to it -- shard, sequence number, item key and write number, the writer's timestamp, the
arrival time and the worker's pid -- to a per-process file, then lands the batch with the product's
own changelog sink (one sink per process, as the built-in factory builds it). So a record delivered
twice to the processor is visible even when the sink's own de-duplication hides it from the change
log, and the change log is what a user of the product would see. :class:`DeliveryTail` and
:func:`read_landed` read those records back.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.processing import Batch, BatchResult

TABLE = "orders"  # the benchmarks' source table (bench.fleet_support creates it)

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
    from consumer.api.sinks import ChangelogSink, ChangelogStore

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

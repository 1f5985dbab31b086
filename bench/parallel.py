"""Per-key parallelism: one shard's throughput with ``processing.parallelization_factor`` 10 over 1.

Method: the emulator serves a 1-partition stream (one shard). Before the worker starts, a backlog is
written: ``KEYS`` items, each written ``WRITES_PER_KEY`` times (write number ``w`` goes to key
``w % KEYS``, so one item's changes are spread through the shard). One ``consumer run`` process
then reads it from TRIM_HORIZON with a function-form processor that spends 20 ms per record (a
sleep, like a call to a slow service) and notes, per record, when it finished it. Throughput =
records finished / (last finish - first finish), first delivery of each record only. Factor 1
reads ``SERIAL_RECORDS`` records (50 records/s: longer would only wait), factor 10 the whole
backlog (GetRecords returns up to 1000 records; each is one flush split over the lanes).
Per-key order violations: items whose records, in the order they were finished, are not in sequence
order (must be 0). Repeated ``REPEATS`` times, each on a fresh emulator and worker.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import Ratio, at_least, at_most
from bench.fleet_records import TABLE
from bench.fleet_support import bench_stack

DELAY_MILLIS = 20
KEYS = 1000
WRITES_PER_KEY = 3
SERIAL_RECORDS = 500
REPEATS = 2
GOAL = 8.0
WORKER = {
    "failover_time_millis": 10_000,
    "idle_time_between_reads_millis": 200,
    "shard_sync_interval_millis": 60_000,
    "task_backoff_time_millis": 100,
    "max_records": 1000,
}
LIMITS = (
    "a flush waits for its slowest lane before the next GetRecords: keys are hashed to lanes, so the "
    "fullest of 10 lanes holds ~115 of 1000 records of random keys (the ideal ratio is ~8.7, not 10); "
    "GetRecords, the checkpoint and the emulator on this shared 2-core machine add to every flush."
)

_fds: dict[str, int] = {}
_lock = threading.Lock()


class SlowRecorder:
    """Function-form processor for this benchmark: 20 ms per record, then one line per record
    (sequence number, key, write number, finish time, lane) appended to a per-process file."""

    def __init__(self, deliveries: str, table: str = TABLE, delay_millis: int = DELAY_MILLIS) -> None:
        with _lock:
            fd = _fds.get(deliveries)
            if fd is None:
                Path(deliveries).mkdir(parents=True, exist_ok=True)
                path = Path(deliveries) / f"finished-{os.getpid()}.jsonl"
                fd = _fds[deliveries] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fd = fd
        self._delay = delay_millis / 1000

    def handle(self, batch: Any) -> None:
        for record in batch.records:
            time.sleep(self._delay)
            body = record.raw.get("dynamodb", {})
            line = {
                "q": record.sequence_number,
                "k": body.get("Keys", {}).get("pk", {}).get("S"),
                "w": int(body.get("NewImage", {}).get("w", {}).get("N", "-1")),
                "d": time.time(),
                "l": batch.lane,
            }
            os.write(self._fd, json.dumps(line, separators=(",", ":")).encode() + b"\n")


def _finished(directory: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(directory.glob("finished-*.jsonl")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                found.append(json.loads(line))
    return found


def _write_backlog(stack: Any, records: int) -> None:
    def put(start: int) -> None:
        client = stack.emulator.client("dynamodb")
        for w in range(start, records, 8):
            client.put_item(TableName=TABLE, Item={"pk": {"S": f"item-{w % KEYS:05d}"}, "w": {"N": str(w)}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(8)))


def measure(factor: int, records: int, backlog: int) -> tuple[float, int, int]:
    """(records/s over the first deliveries of ``records`` records, order violations, lanes used)."""
    processing = {"processor": "bench.parallel:SlowRecorder", "parallelization_factor": factor}
    with bench_stack(
        f"parallel-{factor}", partitions=1, worker=WORKER, changelog=False, processing=processing
    ) as stack:
        _write_backlog(stack, backlog)
        stack.fleet.start_worker()
        directory = stack.workdir / "deliveries"
        deadline = time.monotonic() + 60 + records * DELAY_MILLIS / 1000
        first: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            stack.check_workers()
            for line in _finished(directory):
                first.setdefault(line["q"], line)
            if len(first) >= records:
                break
            time.sleep(0.5)
        problems = stack.problems()
    if len(first) < records:
        raise RuntimeError(f"factor {factor}: only {len(first)} of {records} records finished in time")
    finished = sorted(first.values(), key=lambda line: line["d"])[:records]
    span = finished[-1]["d"] - finished[0]["d"]
    by_key: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for line in first.values():
        by_key[line["k"]].append((line["d"], int(line["q"])))
    violations = sum(
        1 for done in by_key.values() if [q for _, q in sorted(done)] != sorted(q for _, q in done)
    )
    if problems:
        print(f"  ERROR lines in the worker's log ({len(problems)}): {problems[:3]}")
    lanes = len({line["l"] for line in first.values()})
    rate = (len(finished) - 1) / max(span, 1e-9)
    print(
        f"  factor {factor}: {len(finished)} records in {span:.2f} s = {rate:.1f} records/s; "
        f"{lanes} lanes used; per-key order violations {violations}"
    )
    return rate, violations, lanes


def run() -> list[Ratio]:
    print(__doc__)
    began = time.monotonic()
    backlog = KEYS * WRITES_PER_KEY
    print(
        f"parameters: 1 shard, {DELAY_MILLIS} ms per record, {KEYS} keys x {WRITES_PER_KEY} writes = "
        f"{backlog} records of backlog; factor 1 over {SERIAL_RECORDS} records, factor 10 over all; "
        f"{REPEATS} repeats"
    )
    ratios: list[float] = []
    violations = 0
    for _ in range(REPEATS):
        serial, v1, _ = measure(1, SERIAL_RECORDS, SERIAL_RECORDS)
        parallel, v10, _ = measure(10, backlog, backlog)
        violations += v1 + v10
        ratios.append(parallel / serial)
        print(f"  ratio {parallel / serial:.2f}")
    print(f"(parallel benchmark took {time.monotonic() - began:.0f} s)")
    method = (
        f"records/s of one shard at {DELAY_MILLIS} ms per record, factor 10 over factor 1 "
        f"(median ratio {statistics.median(ratios):.2f}); emulator, 1 worker, {KEYS} keys"
    )
    return [
        at_least("throughput_factor10_over_factor1", tuple(ratios), GOAL, method),
        at_most(
            "per_key_order_violations",
            (float(violations),),
            0,
            "items finished out of sequence order, all runs of both factors",
        ),
    ]


if __name__ == "__main__":
    for ratio in run():
        print(ratio.line())

"""Kinesis read throughput per shard of one ``consumer run`` worker, over the shard's read limit; and
that worker's CPU per record over ``orjson.loads`` of each record's own bytes in a fresh process.

Method: the emulator (its Kinesis enforces GetRecords' per-shard limits: 5 calls/s and a read-byte
debt of ``kinesis_read_bytes_per_second``, 2 MiB/s, as emulator/kinesis_limits.py describes) with a
1-shard stream, pre-loaded through PutRecords (the write limits lifted for the load only: it is not
what is measured) with enough records of 1 KiB as Kinesis counts them (data + partition key =
1 024 bytes; the data a 1 KB JSON document) for the warm-up, the window and a margin at the read
limit. Then one real ``consumer run`` process (tools/demo/fleet.py's LocalFleet, the worker's
default settings but TRIM_HORIZON -- so 10 000 records a GetRecords, Kinesis' most --, function-form
processor :class:`Tally`, which only appends one line per batch -- time, shard, record count -- to its
own file) reads the stream from its start. Records/s per shard, counted by whole reads: the batches
handed on are grouped into the reads they came from (a read's batches follow each other within
milliseconds; two reads of a shard are at least 200 ms apart, so a gap over READ_GAP_SECONDS starts a
new read); over the window (WARMUP_SECONDS after the first delivery, WINDOW_SECONDS long), the records
of the reads that start in it, the last one excluded, over the time from the first one's start to the
last one's: whole read cycles (a read and the wait after it), so a window holding a dozen 10 000-record
reads is not biased by where its edges cut them. The window must end before the backlog does
(checked). The limit in records/s: the emulator's
enforced read bytes/s (read back from its live settings) over 1 024 bytes per record = 2 048
records/s at 2 MiB/s. The AWS quotas page says "2 MB/s" per shard for reads and the GetRecords
reference "2 MiB per second"; the emulator, and the worker's pacing (consumer/streams/
kinesis_pacing.py), use 2 MiB = 2 097 152 bytes/s, the larger of the two, so the ratio is the
stricter one (2 000 records/s would give 2.4 % more).
CPU per record: the worker process's CPU (utime + stime of all its threads, /proc) over the
window, over the records handed on in it. The worker is held to the shard's limit, so this
includes everything it does while it waits (lease renewal, the pacing's sleeps, shard sync), spread
over 2 048 records/s. The floor: ``orjson.loads`` of each record's data (the same 1 KB JSON
documents, 20 000 of them), each once, in a fresh interpreter (bench/kinesis_floor.py). Each repeat
a new stream and leases table (a new application name). Goal: throughput >= 0.9 of the limit by the
median and in every repeat; the CPU ratio is stated.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from bench.common import Ratio, at_least, in_fresh_process, machine, stated
from bench.kinesis_floor import write_records
from consumer.processing import Batch

LIMITS = (
    "kinesis_throughput_per_shard_over_limit: the worker's read pacing (consumer/streams/kinesis_pacing.py, "
    "called from consumer/streams/kinesis_reader.py) waits b / 2 MiB after each answer of b bytes was "
    "received (the shard charged it when it served it, earlier: waiting from the call's start could be "
    "refused on AWS), so each read cycle is that wait plus the call's own time until its body is in "
    "(the emulator serialising the records and the transfer; the parse overlaps the wait)."
)
RECORD_BYTES = 1024  # data + partition key, as Kinesis counts a record against the limits
SHARDS = 1
WARMUP_SECONDS = 10.0
WINDOW_SECONDS = 60.0  # about a dozen 10 000-record reads at the limit
MARGIN_SECONDS = 15.0
READ_GAP_SECONDS = 0.1  # batches further apart than this came from different reads
PUT_BATCH = 500  # PutRecords' most records per call
FLOOR_RECORDS = 20_000
REPEATS = 3
START_TIMEOUT = 90.0
PROCESSOR = "bench.kinesis_throughput:Tally"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
ENVIRON = {"PYTHONPATH": str(PROJECT_ROOT), "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}


class Tally:
    """The processor: one line per batch handed on (time, shard, records) to its own file, nothing
    else, so the worker's own path is what is measured."""

    def __init__(self, out_dir: str) -> None:
        path = Path(out_dir) / f"{os.getpid()}-{id(self)}.tally"
        self._out = path.open("a", buffering=1, encoding="utf-8")

    def handle(self, batch: Batch) -> None:
        self._out.write(f"{time.time():.6f} {batch.shard_id} {len(batch.records)}\n")


def partition_key(index: int) -> str:
    return f"k{index:07d}"


def record_json(index: int, size: int) -> bytes:
    """A JSON document of exactly ``size`` bytes (an order event, padded by its note)."""
    doc: dict[str, Any] = {
        "order_id": f"o-{index:09d}",
        "customer": {"id": f"c-{index % 997:05d}", "tier": ("gold", "silver", "bronze")[index % 3]},
        "amount": round(index * 0.37 % 500, 2),
        "currency": "EUR",
        "lines": [{"sku": f"s-{(index + j) % 1009:04d}", "qty": 1 + j, "price": 9.99 + j} for j in range(3)],
        "note": "",
    }
    bare = len(orjson.dumps(doc))
    if bare > size:
        raise ValueError(f"a record of {size} bytes is too small for the document ({bare} bytes bare)")
    doc["note"] = "n" * (size - bare)
    return orjson.dumps(doc)


def record_data(index: int) -> bytes:
    """The data of record ``index``: with its partition key, RECORD_BYTES as Kinesis counts it."""
    return record_json(index, RECORD_BYTES - len(partition_key(index)))


def reads(batches: Iterable[tuple[float, int]]) -> list[tuple[float, int]]:
    """The batches of one shard grouped into the reads they came from: (time of the read's first
    batch, its records), in order (module docstring)."""
    grouped: list[tuple[float, int]] = []
    last = -1.0
    for at, count in sorted(batches):
        if grouped and at - last <= READ_GAP_SECONDS:
            grouped[-1] = (grouped[-1][0], grouped[-1][1] + count)
        else:
            grouped.append((at, count))
        last = at
    return grouped


def window_rate(batches: Iterable[tuple[float, int]], start: float, end: float) -> tuple[float, int]:
    """Records/s over whole read cycles inside [start, end]: the records of the reads starting there,
    the last excluded, over the time from the first one's start to the last one's; and the reads
    counted."""
    inside = [r for r in reads(batches) if start <= r[0] <= end]
    if len(inside) < 3:
        raise RuntimeError(f"{len(inside)} reads started in the window: too few to measure a rate")
    records = sum(n for _, n in inside[:-1])
    return records / (inside[-1][0] - inside[0][0]), len(inside) - 1


def read_tallies(out_dir: Path) -> dict[str, list[tuple[float, int]]]:
    """Every batch handed on so far, by shard: (time, records)."""
    shards: dict[str, list[tuple[float, int]]] = {}
    for path in out_dir.glob("*.tally"):
        for line in path.read_text(encoding="utf-8").splitlines():
            at, shard, count = line.split()
            shards.setdefault(shard, []).append((float(at), int(count)))
    return shards


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of process ``pid`` (/proc/<pid>/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _config(directory: Path, endpoint: str, app: str, stream: str, out_dir: Path) -> None:
    (directory / "kbench.yaml").write_text(
        f"""
application_name: {app}
region: us-east-1
endpoint_url: {endpoint}
table: {{name: unused, partition_key: {{name: pk, type: S}}}}
source: {{kind: kinesis, stream_name: {stream}, shard_count: {SHARDS}}}
worker: {{initial_position: TRIM_HORIZON}}
metrics: {{destination: none}}
processing:
  processor: {PROCESSOR}
  options: {{out_dir: {out_dir}}}
  dead_letter: {{type: none}}
""",
        encoding="utf-8",
    )


def _preload(client: Any, stream: str, records: int) -> None:
    for first in range(0, records, PUT_BATCH):
        indices = range(first, min(first + PUT_BATCH, records))
        entries = [{"Data": record_data(i), "PartitionKey": partition_key(i)} for i in indices]
        answer = client.put_records(StreamName=stream, Records=entries)
        if answer.get("FailedRecordCount"):
            raise RuntimeError(f"{answer['FailedRecordCount']} records refused while loading {stream}")


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def _one_repeat(emu: Any, workdir: Path, attempt: int, limit_records: float) -> dict[str, float]:
    from tools.demo.fleet import LocalFleet

    stream, app = f"kbench-{attempt}", f"kbench-app-{attempt}"
    client = emu.client("kinesis")
    client.create_stream(StreamName=stream, ShardCount=SHARDS)
    _wait_for(
        lambda: (
            client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
            == "ACTIVE"
        ),
        30,
        f"stream {stream} to be ACTIVE",
    )
    loaded = int(limit_records * SHARDS * (WARMUP_SECONDS + WINDOW_SECONDS + MARGIN_SECONDS))
    began = time.perf_counter()
    _preload(client, stream, loaded)
    load_seconds = time.perf_counter() - began
    config, out_dir = workdir / f"config-{attempt}", workdir / f"out-{attempt}"
    config.mkdir()
    out_dir.mkdir()
    _config(config, emu.endpoint, app, stream, out_dir)
    with LocalFleet("kbench", config, workdir / f"logs-{attempt}", ENVIRON) as fleet:
        worker = fleet.start_worker()
        _wait_for(lambda: bool(read_tallies(out_dir)) or not worker.alive, START_TIMEOUT, "a first delivery")
        if not worker.alive:
            raise RuntimeError(f"the worker exited; see {worker.log_path}")
        first = min(at for batches in read_tallies(out_dir).values() for at, _ in batches)
        start = first + WARMUP_SECONDS
        end = start + WINDOW_SECONDS
        time.sleep(max(0.0, start - time.time()))
        cpu0 = process_cpu_seconds(worker.pid)
        time.sleep(max(0.0, end - time.time()))
        cpu1 = process_cpu_seconds(worker.pid)
        if not worker.alive:
            raise RuntimeError(f"the worker exited during the window; see {worker.log_path}")
    tallies = read_tallies(out_dir)
    if len(tallies) != SHARDS:
        raise RuntimeError(f"records came from {len(tallies)} shards, not {SHARDS}")
    rates, cycles, in_window = [], 0, 0
    for shard, batches in sorted(tallies.items()):
        rate, counted = window_rate(batches, start, end)
        rates.append(rate)
        cycles += counted
        in_window += sum(n for at, n in batches if start <= at <= end)
        through_end = sum(n for at, n in batches if at <= end)
        if through_end >= loaded // SHARDS:
            raise RuntimeError(
                f"shard {shard} ran out of backlog inside the window: the rate is not the limit's"
            )
    client.delete_stream(StreamName=stream)
    return {
        "rate": statistics.fmean(rates),
        "cycles": cycles,
        "records_per_read": max(n for shard in tallies.values() for _, n in reads(shard)),
        "cpu_per_record": (cpu1 - cpu0) / in_window,
        "cpu_share": (cpu1 - cpu0) / (end - start),
        "loaded": loaded,
        "load_seconds": load_seconds,
    }


def run(repeats: int = REPEATS) -> list[Ratio]:
    from emulator.testing import running_emulator

    print(__doc__)
    print(f"machine: {machine()}")
    rows: list[dict[str, float]] = []
    floors: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-kinesis-") as folder, running_emulator() as emu:
        workdir = Path(folder)
        faults = emu.control.set_faults(
            kinesis_write_records_per_second=1e9, kinesis_write_bytes_per_second=1e12
        )
        read_bytes = float(faults["kinesis_read_bytes_per_second"])
        limit_records = read_bytes / RECORD_BYTES
        floor_file = str(workdir / "records.bin")
        write_records([record_data(i) for i in range(FLOOR_RECORDS)], floor_file)
        print(
            f"parameters: {SHARDS} shard(s), records of {RECORD_BYTES} B (data + partition key), emulator read "
            f"limit {read_bytes:,.0f} B/s per shard = {limit_records:,.0f} records/s, "
            f"{faults['reads_per_shard_per_second']:g} GetRecords/s per shard; warm-up {WARMUP_SECONDS:g} s, "
            f"window {WINDOW_SECONDS:g} s; floor on {FLOOR_RECORDS:,} records; repeats {repeats}"
        )
        print(
            f"{'repeat':>6} | {'records/s/shard':>15} {'over limit':>10} | {'worker CPU/rec':>14} "
            f"{'floor CPU/rec':>13} {'ratio':>6} | CPU share, reads counted, load"
        )
        for attempt in range(repeats):
            row = _one_repeat(emu, workdir, attempt, limit_records)
            floor = in_fresh_process("bench.kinesis_floor", floor_file, timeout=300)
            floors.append(floor["seconds"] / floor["records"])
            rows.append(row)
            print(
                f"{attempt + 1:>6} | {row['rate']:15,.0f} {row['rate'] / limit_records:10.3f} | "
                f"{row['cpu_per_record'] * 1e6:11.1f} µs {floors[-1] * 1e6:10.2f} µs "
                f"{row['cpu_per_record'] / floors[-1]:6.1f} | {row['cpu_share']:.2f} of a core, "
                f"{row['cycles']:.0f} read cycles of up to {row['records_per_read']:,.0f} records, "
                f"{row['loaded']:,} records loaded in {row['load_seconds']:.1f} s"
            )
    rates = [r["rate"] for r in rows]
    cpu = [r["cpu_per_record"] for r in rows]

    def spread(values: list[float], scale: float, unit: str) -> str:
        low, mid, high = min(values) * scale, statistics.median(values) * scale, max(values) * scale
        return f"{low:,.1f} / {mid:,.1f} / {high:,.1f} {unit}"

    ratios = [
        at_least(
            "kinesis_throughput_per_shard_over_limit",
            tuple(rate / limit_records for rate in rates),
            0.9,
            f"records/s handed on per shard by one consumer run worker (default settings, TRIM_HORIZON, "
            f"function-form processor writing one line per batch) reading a pre-loaded 1-shard emulator "
            f"stream (10 000 records a GetRecords), counted over whole read cycles in a {WINDOW_SECONDS:g} s "
            f"window / the shard's read limit at 1 KiB records: the "
            f"emulator's enforced {read_bytes:,.0f} B/s (2 MiB/s; AWS's quotas page says 2 MB/s) / "
            f"{RECORD_BYTES} B (data + partition key) = {limit_records:,.0f} records/s; worker "
            f"{spread(rates, 1, 'records/s')} (min / median / max)",
        ),
        stated(
            "kinesis_record_cpu_vs_fresh_orjson_each_record",
            tuple(c / f for c, f in zip(cpu, floors, strict=True)),
            f"CPU/record of that worker process over the window (all its threads, /proc; held to the "
            f"shard's limit, so its waiting work -- lease renewal, pacing, shard sync -- is spread over "
            f"{limit_records:,.0f} records/s; HTTP to the emulator, botocore, base64, de-aggregation "
            f"check, lifecycle, checkpoint per batch) / orjson.loads of each record's own 1 KB JSON data "
            f"in a fresh interpreter; worker {spread(cpu, 1e6, 'µs')}, floor {spread(floors, 1e6, 'µs')} "
            f"(min / median / max); plain (not KPL-aggregated) records",
        ),
    ]
    for ratio in ratios:
        print(f"{ratio.name}: {ratio.spread()}")
        print(ratio.line())
    return ratios


if __name__ == "__main__":
    run()

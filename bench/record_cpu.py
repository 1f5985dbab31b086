"""Per-record CPU: the worker's whole record path over json.loads alone, and stock boto3 over the worker.

Method: the canned GetRecords responses (bench/canned.py; one response of 1000 records per shard)
are fed, in one process, through
(a) the worker's full path to a no-op processor, checkpointing: a real boto3 ``dynamodbstreams``
    client whose transport is the canned one (botocore serialises, signs and runs its handlers; no
    socket), the DynamoDBStreamSource fast parser, SourceReader, one ShardConsumer per lease as the
    scheduler builds it, the processor factory of ``consumer run`` (function form: failure policy,
    filter, batching; handler ``bench.canned:noop``) behind the lifecycle bridge, and the checkpoint
    through the LeaseCoordinator into an in-memory leases table (heartbeat and taker threads running).
    Each consumer is first stepped through its parents check and GetShardIterator (not timed); the
    timed step is one GetRecords + delivery + checkpoint of 1000 records;
(b) ``json.loads`` alone on the same bytes;
(c) stock boto3: botocore's JSON parser with the GetRecords output shape, then boto3's
    TypeDeserializer on Keys, NewImage and OldImage of every record — a lower bound for any stock
    boto3 consumer (no request, no lifecycle, no checkpoint). It is ~7 x slower than the others, so
    it runs on the first 4 shards only, and ``boto3_vs_worker`` divides by (a) on those same shards.
CPU is ``time.process_time`` (all threads of the process) per record; each repeat builds a fresh
worker and leases table, runs (a), (b), (c) in turn with a ``gc.collect()`` before each.
Goals: (a)/(b) <= 2 (set before measuring); (c)/(a) >= 1 (informational: the worker must never
cost more than the parse it replaces).
"""

from __future__ import annotations

import cProfile
import gc
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import canned
from bench.common import Ratio, at_least, at_most, machine
from bench.parse_floor import boto3_path

LIMITS = (
    "see the printed profile: orjson.loads of the body is most of (a); the rest is the per-record "
    "Python of the lifecycle and the function form (sequence-number checks in ShardConsumer._deliver, "
    "FunctionProcessor.process_records, FailurePolicyRunner.run) and freeing the parsed records."
)
REPEATS = 3
ROOT = str(Path(__file__).resolve().parents[1]) + "/"
BOTO_SHARDS = 4
PROFILE_SHARDS = 8


def worker_path(stream: canned.CannedStream) -> list[float]:
    """(a): CPU seconds of each shard's timed step (one GetRecords of 1000 records, delivered, checkpointed)."""
    worker = canned.canned_worker(stream, range(stream.shards))
    try:
        consumers = worker.ready_consumers()
        gc.collect()
        seconds = []
        for consumer in consumers:
            started = time.process_time()
            consumer.step()
            seconds.append(time.process_time() - started)
        for index, consumer in enumerate(consumers):
            assert consumer.records_delivered == stream.records_per_response, consumer.records_delivered
            checkpoint = worker.checkpoint_of(consumer.shard_id)
            assert checkpoint == stream.last_sequence[index], (consumer.shard_id, checkpoint)
        return seconds
    finally:
        worker.coordinator.stop(release=False)


def cpu(function: Callable[[bytes], Any], bodies: list[bytes]) -> float:
    gc.collect()
    started = time.process_time()
    for body in bodies:
        function(body)
    return time.process_time() - started


def profile(stream: canned.CannedStream, shards: int) -> str:
    """cProfile of (a) on ``shards`` shards: the top functions by own time."""
    small = canned.CannedStream(
        stream.bodies[:shards], stream.last_sequence[:shards], stream.records_per_response, stream.seed
    )
    worker = canned.canned_worker(small, range(small.shards))
    try:
        consumers = worker.ready_consumers()
        gc.collect()
        profiler = cProfile.Profile()
        profiler.enable()
        for consumer in consumers:
            consumer.step()
        profiler.disable()
    finally:
        worker.coordinator.stop(release=False)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:12]  # type: ignore[attr-defined]
    lines = [f"profile of (a), {small.records:,} records, top functions by own time (of {total:.2f} s):"]
    for (filename, line, name), (_, calls, own, _cumulative, _) in rows:
        where = filename.rsplit("/site-packages/", 1)[-1].removeprefix(ROOT)
        lines.append(f"  {100 * own / total:5.1f} %  {calls:>7} calls  {name} ({where}:{line})")
    lines.append(
        "  (_step's own time is freeing the delivered batch's parsed records as the step's frames unwind)"
    )
    stages = {
        "botocore call (serialise, sign, handlers)": ("botocore/client.py", "_make_api_call"),
        "fast parse (parse_get_records)": ("consumer/streams/wire.py", "parse_get_records"),
        "delivery (ShardConsumer._deliver)": ("consumer/lifecycle/shard_consumer.py", "_deliver"),
        "  of which the function form": ("consumer/processing/function_processor.py", "process_records"),
        "checkpoint (ShardCheckpointer)": ("consumer/lifecycle/checkpointer.py", "checkpoint"),
    }
    cumulative = {(f, n): row[3] for (f, _, n), row in stats.stats.items()}  # type: ignore[attr-defined]
    for label, (suffix, function) in stages.items():
        spent = sum(t for (f, n), t in cumulative.items() if n == function and f.endswith(suffix))
        lines.append(f"  stage: {label:45} {100 * spent / total:5.1f} % (cumulative)")
    return "\n".join(lines)


def run(repeats: int = REPEATS) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    started = time.perf_counter()
    stream = canned.load()
    boto_shards = min(BOTO_SHARDS, stream.shards)
    print(
        f"parameters: {stream.describe()}; (c) on {boto_shards} shards = "
        f"{boto_shards * stream.records_per_response:,} records; repeats {repeats}; "
        f"canned data ready in {time.perf_counter() - started:.1f} s"
    )
    bodies = stream.all_bodies()
    boto = boto3_path()
    records = stream.records
    per_shard = stream.records_per_response
    ours: list[float] = []
    floor: list[float] = []
    stock: list[float] = []
    ours_on_boto_shards: list[float] = []
    print(
        f"{'repeat':>6} | {'(a) worker µs/rec':>17} {'(b) json.loads':>14} {'(c) boto3':>10} | {'a/b':>5} {'c/a':>5}"
    )
    for attempt in range(repeats):
        steps = worker_path(stream)
        ours.append(sum(steps) / records)
        ours_on_boto_shards.append(sum(steps[:boto_shards]) / (boto_shards * per_shard))
        floor.append(cpu(json.loads, bodies) / records)
        stock.append(cpu(boto, bodies[:boto_shards]) / (boto_shards * per_shard))
        print(
            f"{attempt + 1:>6} | {ours[-1] * 1e6:17.1f} {floor[-1] * 1e6:14.1f} {stock[-1] * 1e6:10.1f} | "
            f"{ours[-1] / floor[-1]:5.2f} {stock[-1] / ours_on_boto_shards[-1]:5.2f}"
        )
    print(profile(stream, min(PROFILE_SHARDS, stream.shards)))
    a, b, c = (statistics.median(v) * 1e6 for v in (ours, floor, stock))
    print(
        f"figures (medians, CPU µs per record): (a) worker {a:.1f}, (b) json.loads {b:.1f}, (c) boto3 {c:.1f}"
    )
    ratios = [
        at_most(
            "record_cpu_vs_json",
            tuple(x / y for x, y in zip(ours, floor, strict=True)),
            2.0,
            f"CPU/record: worker's full path (boto3 client on a canned transport, fast parser, ShardConsumer, "
            f"function-form no-op, checkpoint to in-memory leases) / json.loads, same bytes; "
            f"{stream.shards} x {per_shard} records, {stream.size / records:.0f} B/record; worker {a:.1f} µs, "
            f"json.loads {b:.1f} µs",
        ),
        at_least(
            "boto3_vs_worker",
            tuple(x / y for x, y in zip(stock, ours_on_boto_shards, strict=True)),
            1.0,
            f"CPU/record: botocore GetRecords parser + TypeDeserializer on every image / the worker's full path, "
            f"same {boto_shards} x {per_shard} records; boto3 {c:.1f} µs",
        ),
    ]
    for ratio in ratios:
        print(f"{ratio.name}: {ratio.spread()}")
        print(ratio.line())
    return ratios


if __name__ == "__main__":
    run()

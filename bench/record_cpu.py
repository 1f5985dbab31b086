"""Per-record CPU: the worker's whole record path over orjson.loads alone, and stock boto3 over the worker.

Method: the canned GetRecords responses (bench/canned.py; one response of 1000 records per shard)
are written to a file and each repeat runs in a fresh interpreter (``python -m bench.record_cpu
--child FILE``), which feeds them through
(a) the worker's full path to a no-op processor, checkpointing: a real boto3 ``dynamodbstreams``
    client whose transport is the canned one (botocore serialises, signs and runs its handlers; no
    socket), the DynamoDBStreamSource fast parser, SourceReader, one ShardConsumer per lease as the
    scheduler builds it, the processor factory of ``consumer run`` (function form: failure policy,
    filter, batching; handler ``bench.canned_worker:noop``) behind the lifecycle bridge, and the checkpoint
    through the LeaseCoordinator into an in-memory leases table (heartbeat and taker threads running).
    Each consumer is first stepped through its parents check and GetShardIterator (not timed); the
    timed step is one GetRecords + delivery + checkpoint of 1000 records;
(b) ``orjson.loads`` alone on the same bytes (the parser the worker uses: the honest floor), timed
    right after (a) with that worker still alive: a parse in the worker's process pays the garbage
    collector on the worker's heap (~2/3 of orjson.loads' CPU here), so both sides pay the same;
(d) (a) with a processor that reads every image of every record (``keys``, ``new_image``,
    ``old_image``: Python values, boto3's TypeDeserializer semantics; handler
    ``bench.record_cpu:read_every_image``);
(c) stock boto3: botocore's JSON parser with the GetRecords output shape, then boto3's
    TypeDeserializer on Keys, NewImage and OldImage of every record — a lower bound for any stock
    boto3 consumer (no request, no lifecycle, no checkpoint). It is ~7 x slower than the others, so
    it runs on the first 4 shards only, and ``boto3_vs_worker`` divides by (a) on those same shards;
(e) (a) and (b) again on a fresh worker whose start-up heap was ``gc.freeze()``-d (informational:
    the effect of item 4's gc tuning, which belongs to the worker's start-up code, not to this path).
CPU is ``time.process_time`` (all threads of the process) per record, with a ``gc.collect()``
before each of (a)-(e). Goals: (a)/(b) <= 1.5; (d)/(b) is stated beside it (no goal: it is the
processor's own conversion work); (c)/(a) >= 1 (the worker must never cost more than the parse it
replaces).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench import canned, canned_worker
from bench.common import Ratio, at_least, at_most, in_fresh_process, machine
from bench.parse_floor import boto3_path
from consumer.processing.api import Batch

LIMITS = (
    "see the printed profile: orjson.loads of the body is most of (a), and the garbage collector is ~2/3 of "
    "orjson.loads itself on the worker's heap; then holding each record as bytes (the cut of the body and "
    "WireRecord.from_parsed, ~0.1-0.2 x) and the per-record Python of the lifecycle and the function form."
)
REPEATS = 3
ROOT = Path(__file__).resolve().parents[1]
PREFIX = str(ROOT) + "/"
BOTO_SHARDS = 4
PROFILE_SHARDS = 8


def read_every_image(batch: Batch) -> None:
    """A processor that converts every image of every record to Python values."""
    for record in batch.records:
        _ = record.keys, record.new_image, record.old_image


def worker_path(
    stream: canned.CannedStream, processor: str = "bench.canned_worker:noop", freeze: bool = False
) -> tuple[list[float], float]:
    """(a), (d), (e): CPU seconds of each shard's timed step (one GetRecords of 1000 records,
    delivered, checkpointed), and (b): CPU seconds of ``orjson.loads`` of the same bodies in the same
    heap (the worker still alive), so that both pay the same garbage collector."""
    settings = canned_worker.bench_settings(processing={"processor": processor})
    worker = canned_worker.canned_worker(stream, range(stream.shards), settings)
    try:
        consumers = worker.ready_consumers()
        gc.collect()
        if freeze:
            gc.freeze()
        seconds = []
        for consumer in consumers:
            started = time.process_time()
            consumer.step()
            seconds.append(time.process_time() - started)
        for index, consumer in enumerate(consumers):
            assert consumer.records_delivered == stream.records_per_response, consumer.records_delivered
            checkpoint = worker.checkpoint_of(consumer.shard_id)
            assert checkpoint == stream.last_sequence[index], (consumer.shard_id, checkpoint)
        return seconds, cpu(orjson.loads, stream.all_bodies())
    finally:
        if freeze:
            gc.unfreeze()
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
    worker = canned_worker.canned_worker(small, range(small.shards))
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
        where = filename.rsplit("/site-packages/", 1)[-1].removeprefix(PREFIX)
        lines.append(f"  {100 * own / total:5.1f} %  {calls:>7} calls  {name} ({where}:{line})")
    lines.append("  (_step's own time is freeing the delivered batch's records as the step's frames unwind)")
    stages = {
        "botocore call (serialise, sign, handlers)": ("botocore/client.py", "_make_api_call"),
        "fast parse (parse_get_records)": ("consumer/streams/wire.py", "parse_get_records"),
        "  of which holding each record as bytes": ("consumer/records.py", "from_parsed"),
        "delivery (ShardConsumer._deliver)": ("consumer/lifecycle/shard_consumer.py", "_deliver"),
        "  of which the function form": ("consumer/processing/function_processor.py", "process_records"),
        "checkpoint (ShardCheckpointer)": ("consumer/lifecycle/checkpointer.py", "checkpoint"),
    }
    cumulative = {(f, n): row[3] for (f, _, n), row in stats.stats.items()}  # type: ignore[attr-defined]
    for label, (suffix, function) in stages.items():
        spent = sum(t for (f, n), t in cumulative.items() if n == function and f.endswith(suffix))
        lines.append(f"  stage: {label:45} {100 * spent / total:5.1f} % (cumulative)")
    return "\n".join(lines)


def child(path: str) -> dict[str, Any]:
    """One repeat, measured in this (fresh) process: CPU seconds per record of (a)-(e)."""
    stream = canned.read(path)
    boto_shards = min(BOTO_SHARDS, stream.shards)
    per_shard = stream.records_per_response
    n = stream.records
    steps, floor = worker_path(stream)
    floor_after = cpu(orjson.loads, stream.all_bodies())  # the worker stopped: a smaller heap
    images, images_floor = worker_path(stream, "bench.record_cpu:read_every_image")
    stock = cpu(boto3_path(), stream.all_bodies()[:boto_shards])
    frozen, frozen_floor = worker_path(stream, freeze=True)
    return {
        "worker": sum(steps) / n,
        "worker_on_boto_shards": sum(steps[:boto_shards]) / (boto_shards * per_shard),
        "orjson": floor / n,
        "orjson_after_stop": floor_after / n,
        "images": sum(images) / n,
        "images_orjson": images_floor / n,
        "boto3": stock / (boto_shards * per_shard),
        "frozen": sum(frozen) / n,
        "frozen_orjson": frozen_floor / n,
    }


def stated(name: str, values: tuple[float, ...], method: str) -> Ratio:
    """A ratio reported beside the others, with no goal of its own."""
    return Ratio(name, values, "stated", True, method)


def run(repeats: int = REPEATS) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    started = time.perf_counter()
    stream = canned.load()
    boto_shards = min(BOTO_SHARDS, stream.shards)
    per_shard = stream.records_per_response
    print(
        f"parameters: {stream.describe()}; (c) on {boto_shards} shards = "
        f"{boto_shards * per_shard:,} records; repeats {repeats}, each in a fresh process; "
        f"canned data ready in {time.perf_counter() - started:.1f} s"
    )
    runs: list[dict[str, float]] = []
    print(
        f"{'repeat':>6} | {'(a) worker':>10} {'(b) orjson':>10} {'(d) images':>10} {'(c) boto3':>10} "
        f"{'(e) frozen':>10} {'its (b)':>8} | {'a/b':>5} {'d/b':>5} {'c/a':>5} {'e/b':>5}  (CPU µs per record)"
    )
    with tempfile.TemporaryDirectory(prefix="bench-record-cpu-") as folder:
        path = os.path.join(folder, "canned.bin")
        canned.write(stream, path)
        for attempt in range(repeats):
            f = in_fresh_process("bench.record_cpu", "--child", path, timeout=900)
            runs.append(f)
            print(
                f"{attempt + 1:>6} | {f['worker'] * 1e6:10.1f} {f['orjson'] * 1e6:10.1f} {f['images'] * 1e6:10.1f} "
                f"{f['boto3'] * 1e6:10.1f} {f['frozen'] * 1e6:10.1f} {f['frozen_orjson'] * 1e6:8.1f} | "
                f"{f['worker'] / f['orjson']:5.2f} {f['images'] / f['images_orjson']:5.2f} "
                f"{f['boto3'] / f['worker_on_boto_shards']:5.2f} {f['frozen'] / f['frozen_orjson']:5.2f}"
            )
    print(profile(stream, min(PROFILE_SHARDS, stream.shards)))

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs) * 1e6

    def over(top: str, bottom: str) -> tuple[float, ...]:
        return tuple(r[top] / r[bottom] for r in runs)

    a, b, c, d, e = (median(k) for k in ("worker", "orjson", "boto3", "images", "frozen"))
    b_after, e_floor = median("orjson_after_stop"), median("frozen_orjson")
    print(
        f"figures (medians, CPU µs per record): (a) worker {a:.1f}, (b) orjson.loads {b:.1f} (worker alive; "
        f"{b_after:.1f} once it is stopped: a/that = {a / b_after:.2f}), (d) every image read {d:.1f}, "
        f"(c) boto3 {c:.1f}, (e) worker after gc.freeze() {e:.1f} over orjson.loads {e_floor:.1f} in that heap"
    )
    where = (
        f"{stream.shards} x {per_shard} records, {stream.size / stream.records:.0f} B/record, each repeat in a "
        "fresh process, orjson.loads timed in the same heap with the worker alive"
    )
    ratios = [
        at_most(
            "record_cpu_vs_orjson",
            over("worker", "orjson"),
            1.5,
            f"CPU/record: worker's full path (boto3 client on a canned transport, fast parser holding each record "
            f"as bytes, ShardConsumer, function-form no-op, checkpoint to in-memory leases) / orjson.loads, same "
            f"bytes; {where}; worker {a:.1f} µs, orjson.loads {b:.1f} µs (gc is ~2/3 of both); over orjson.loads "
            f"timed once the worker is stopped (a smaller heap, less gc): {a / b_after:.2f} x",
        ),
        stated(
            "record_cpu_every_image_vs_orjson",
            over("images", "images_orjson"),
            f"CPU/record: as record_cpu_vs_orjson with a processor reading keys, new_image and old_image of every "
            f"record (Python values, boto3 semantics) / orjson.loads; {where}; {d:.1f} µs",
        ),
        stated(
            "record_cpu_vs_orjson_gc_frozen",
            over("frozen", "frozen_orjson"),
            f"CPU/record: as record_cpu_vs_orjson with the start-up heap gc.freeze()-d (item 4, for the worker's "
            f"start-up code; not done by the worker yet); {where}; worker {e:.1f} µs, orjson.loads {e_floor:.1f} µs",
        ),
        at_least(
            "boto3_vs_worker",
            over("boto3", "worker_on_boto_shards"),
            1.0,
            f"CPU/record: botocore GetRecords parser + TypeDeserializer on every image / the worker's full path "
            f"(no-op), same {boto_shards} x {per_shard} records; boto3 {c:.1f} µs",
        ),
    ]
    for ratio in ratios:
        print(f"{ratio.name}: {ratio.spread()}")
        print(ratio.line())
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.record_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--child", metavar="FILE", help="measure in this process, canned responses from FILE")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
    else:
        run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

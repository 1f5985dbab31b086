"""Per-record CPU: the worker's whole record path over ``orjson.loads`` in a fresh process, and
stock boto3 over the worker.

Method: the canned GetRecords responses (bench/canned.py; one response of 1000 records per shard)
are written to a file; each repeat runs three fresh interpreters, one after the other:

(b) the floors, ``python -m bench.fresh_orjson FILE``: ``orjson.loads`` of every body once, in an
    interpreter that imported nothing but orjson, its collector as Python starts it — what a user
    parsing the responses themselves pays; then the per-record floor: each body cut into its
    records as a user would cut it (``bytes.find`` of the boundary between two records), and
    ``orjson.loads`` of each record's own bytes, the cut timed with the parses — the best a user
    could run, about a third of the first, since each record's objects are freed while still in the
    CPU's caches;
(a) the worker as ``consumer run`` runs it (``--child FILE --gc tuned``): a real boto3
    ``dynamodbstreams`` client whose transport is the canned one (botocore serialises, signs and
    runs its handlers; no socket), the DynamoDBStreamSource fast parser, SourceReader, one
    ShardConsumer per lease as the scheduler builds it, the processor factory of ``consumer run``
    (function form: failure policy, filter, batching; handler ``bench.canned_worker:noop``) behind
    the lifecycle bridge, and the checkpoint through the LeaseCoordinator into an in-memory leases
    table (heartbeat and taker threads running). Each consumer is first stepped through its parents
    check and GetShardIterator; then ``consumer.runtime.gc_tuning.tune_for_long_running()``, which
    ``Worker.run`` calls once start-up is done (not timed). The timed step is one GetRecords +
    delivery + checkpoint of 1000 records. In the same process, after it: the stages by perf
    counter (``parse_get_records`` alone and ``orjson.loads`` alone on the same bodies, in that
    heap), then (d): a fresh worker whose processor reads every image of every record (``keys``,
    ``new_image``, ``old_image``: Python values, boto3's TypeDeserializer semantics; handler
    ``bench.record_cpu:read_every_image``) with ``processing.convert_images: on_fetch``, the setting
    for such a processor, and the same with the default ``when_read`` (stated);
(u) the same worker with CPython's default collector (``--child FILE --gc default``: what a worker
    embedded in another program, ``Worker(tune_gc=False)``, pays), then (c) stock boto3: botocore's
    JSON parser with the GetRecords output shape and boto3's TypeDeserializer on Keys, NewImage and
    OldImage of every record — a lower bound for any stock boto3 consumer (no request, no lifecycle,
    no checkpoint); ~7 x slower, so on the first 4 shards only, and ``boto3_vs_worker`` divides it
    by (a) on those same shards.
CPU is ``time.process_time`` (all threads of the process) per record. Goals: (a) over the
per-record floor <= 1.2 by the median, no repeat above 1.6 (a processor that reads nothing); (a) over
the whole-body floor <= 1.5; (d) over the whole-body floor <= 1.5 (a processor that reads every
image: the user's alternative parses the bodies and converts the images too, so this compares the
same work less the conversion, which the worker pays on top); (c)/(a) >= 1 (the worker must never
cost more than the parse it replaces); the others are stated.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench import canned, canned_worker
from bench.common import Ratio, at_least, at_most, in_fresh_process, machine, stated
from bench.parse_floor import boto3_path
from bench.record_profile import stages_line
from consumer.api.worker import parse_get_records, tune_for_long_running
from consumer.processing import Batch

LIMITS = (
    "the worker cuts each body into its records, as the per-record floor does, but decodes of each "
    "record only the four fields it holds (msgspec, the rest skipped: consumer/streams/held_fields.py), "
    "where the floor builds every image with orjson; it pays on top: holding each record as its bytes "
    "with those fields, one botocore call per 1000 records (serialise, sign, handlers, the body read in "
    "64 KiB chunks and joined) and the lifecycle, function form and checkpoint per batch; a processor "
    "that reads every image parses each record whole with orjson and pays the conversion of its images "
    "(boto3's types), from that parse with processing.convert_images: on_fetch (with the default when_read, a second "
    "parse of each record as well); see the printed stages and docs/streams.md's profile."
)
# Fresh processes per figure: with three, the per-record row's median moved 1.29-2.41 between two
# runs on a quiet machine.
REPEATS = 7
BOTO_SHARDS = 4


def read_every_image(batch: Batch) -> None:
    """A processor that converts every image of every record to Python values."""
    for record in batch.records:
        _ = record.keys, record.new_image, record.old_image


def worker_path(
    stream: canned.CannedStream,
    processor: str = "bench.canned_worker:noop",
    tuned: bool = True,
    convert_images: str = "when_read",
) -> list[float]:
    """CPU seconds of each shard's timed step (one GetRecords of 1000 records, delivered,
    checkpointed), the collector tuned as ``Worker.run`` tunes it once start-up is done, or not."""
    settings = canned_worker.bench_settings(
        processing={"processor": processor, "convert_images": convert_images}
    )
    worker = canned_worker.canned_worker(stream, range(stream.shards), settings)
    try:
        consumers = worker.ready_consumers()
        if tuned:
            tune_for_long_running()
        else:
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
    started = time.process_time()
    for body in bodies:
        function(body)
    return time.process_time() - started


def child(path: str, tuned: bool) -> dict[str, Any]:
    """One repeat's worker process (fresh): CPU seconds per record of (a), its stages and (d) when
    ``tuned``; of (u) and (c) otherwise."""
    stream = canned.read(path)
    boto_shards = min(BOTO_SHARDS, stream.shards)
    per_shard = stream.records_per_response
    n = stream.records
    steps = worker_path(stream, tuned=tuned)
    figures = {
        "worker": sum(steps) / n,
        "worker_on_boto_shards": sum(steps[:boto_shards]) / (boto_shards * per_shard),
    }
    bodies = stream.all_bodies()
    if tuned:
        shard = canned.shard_id(0)
        figures["parse_in_heap"] = cpu(lambda body: parse_get_records(body, shard, 0), bodies) / n
        figures["orjson_in_heap"] = cpu(orjson.loads, bodies) / n
        images = "bench.record_cpu:read_every_image"
        figures["images"] = sum(worker_path(stream, images, convert_images="on_fetch")) / n
        figures["images_when_read"] = sum(worker_path(stream, images)) / n
    else:
        gc.collect()
        figures["boto3"] = cpu(boto3_path(), bodies[:boto_shards]) / (boto_shards * per_shard)
    return figures


def _spread(values: list[float]) -> str:
    return f"{min(values) * 1e6:.1f} / {statistics.median(values) * 1e6:.1f} / {max(values) * 1e6:.1f} µs"


def run(repeats: int = REPEATS) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    started = time.perf_counter()
    stream = canned.load()
    boto_shards = min(BOTO_SHARDS, stream.shards)
    per_shard = stream.records_per_response
    print(
        f"parameters: {stream.describe()}; (c) on {boto_shards} shards = "
        f"{boto_shards * per_shard:,} records; repeats {repeats}, each three fresh processes; "
        f"canned data ready in {time.perf_counter() - started:.1f} s"
    )
    runs: list[dict[str, float]] = []
    print(
        f"{'repeat':>6} | {'(b) fresh':>9} {'(a) worker':>10} {'(d) images':>10} {'(u) untuned':>11} "
        f"{'(c) boto3':>9} | {'a/b':>5} {'d/b':>5} {'u/b':>5} {'c/a':>5}  (CPU µs per record)"
    )
    with tempfile.TemporaryDirectory(prefix="bench-record-cpu-") as folder:
        path = os.path.join(folder, "canned.bin")
        canned.write(stream, path)
        for attempt in range(repeats):
            floor = in_fresh_process("bench.fresh_orjson", path, timeout=300)
            f = {
                "fresh_orjson": floor["seconds"] / floor["records"],
                "fresh_orjson_each": floor["per_record_seconds"] / floor["records"],
            }
            f |= in_fresh_process("bench.record_cpu", "--child", path, "--gc", "tuned", timeout=900)
            untuned = in_fresh_process("bench.record_cpu", "--child", path, "--gc", "default", timeout=900)
            f |= {"untuned": untuned["worker"], "boto3": untuned["boto3"]}
            runs.append(f)
            b = f["fresh_orjson"]
            print(
                f"{attempt + 1:>6} | {b * 1e6:9.1f} {f['worker'] * 1e6:10.1f} {f['images'] * 1e6:10.1f} "
                f"{f['untuned'] * 1e6:11.1f} {f['boto3'] * 1e6:9.1f} | {f['worker'] / b:5.2f} "
                f"{f['images'] / b:5.2f} {f['untuned'] / b:5.2f} {f['boto3'] / f['worker_on_boto_shards']:5.2f}"
            )
        print(in_fresh_process("bench.record_cpu", "--profile", path, timeout=600)["profile"])
    print(stages_line(runs))

    def values(key: str) -> list[float]:
        return [r[key] for r in runs]

    def over(top: str, bottom: str) -> tuple[float, ...]:
        return tuple(r[top] / r[bottom] for r in runs)

    floor_spread = _spread(values("fresh_orjson"))
    where = (
        f"{stream.shards} x {per_shard} records, {stream.size / stream.records:.0f} B/record, each repeat in "
        f"fresh processes; floor: orjson.loads of the same bodies in a fresh interpreter importing only orjson, "
        f"default gc, min/median/max {floor_spread}"
    )
    ratios = [
        at_most(
            "record_cpu_vs_fresh_orjson",
            over("worker", "fresh_orjson"),
            1.5,
            f"CPU/record: worker's full path as consumer run runs it (boto3 client on a canned transport, fast "
            f"parser holding each record as bytes, ShardConsumer, function-form no-op, checkpoint to in-memory "
            f"leases; gc tuned by Worker.run's tune_for_long_running) / orjson.loads in a fresh process, same "
            f"bytes; {where}; worker {_spread(values('worker'))}",
        ),
        at_most(
            "record_cpu_vs_fresh_orjson_each_record",
            over("worker", "fresh_orjson_each"),
            1.2,
            f"CPU/record: the same worker / the per-record floor in that fresh process: each body cut into its "
            f"records as a user would (bytes.find of the boundary), orjson.loads of each record's own bytes, the "
            f"cut timed with the parses; floor {_spread(values('fresh_orjson_each'))} per record; worker "
            f"{_spread(values('worker'))}",
            worst=1.6,
        ),
        stated(
            "record_cpu_untuned_gc_vs_fresh_orjson",
            over("untuned", "fresh_orjson"),
            f"CPU/record: as record_cpu_vs_fresh_orjson with CPython's default collector (a worker embedded in "
            f"another program, Worker(tune_gc=False)); {where}; worker {_spread(values('untuned'))}",
        ),
        at_most(
            "record_cpu_every_image_vs_fresh_orjson",
            over("images", "fresh_orjson"),
            1.5,
            f"CPU/record: as record_cpu_vs_fresh_orjson with a processor reading keys, new_image and old_image "
            f"of every record (Python values, boto3 semantics), processing.convert_images: on_fetch (converted "
            f"from the parse that checks each record); {where}; {_spread(values('images'))}",
        ),
        stated(
            "record_cpu_every_image_when_read_vs_fresh_orjson",
            over("images_when_read", "fresh_orjson"),
            f"CPU/record: the same processor with processing.convert_images: when_read (the default: each "
            f"record's bytes parsed again when its images are first read); {_spread(values('images_when_read'))}",
        ),
        stated(
            "record_cpu_vs_orjson_in_worker_heap",
            over("worker", "orjson_in_heap"),
            f"CPU/record: the worker / orjson.loads timed inside the worker's own (tuned) process after it ran "
            f"(not the goal's floor: the worker's heap is not what a user's parser runs in); "
            f"orjson.loads there {_spread(values('orjson_in_heap'))}",
        ),
        at_least(
            "boto3_vs_worker",
            over("boto3", "worker_on_boto_shards"),
            1.0,
            f"CPU/record: botocore GetRecords parser + TypeDeserializer on every image (default gc) / the worker's "
            f"full path (no-op, tuned gc), same {boto_shards} x {per_shard} records; boto3 {_spread(values('boto3'))}",
        ),
    ]
    for ratio in ratios:
        print(f"{ratio.name}: {ratio.spread()}")
        print(ratio.line())
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.record_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--child", metavar="FILE", help="measure in this process, canned responses from FILE")
    parser.add_argument(
        "--gc", choices=("tuned", "default"), default="tuned", help="with --child: the collector"
    )
    parser.add_argument(
        "--profile", metavar="FILE", help="print a cProfile of (a) in this process, from FILE"
    )
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, tuned=args.gc == "tuned")))
    elif args.profile:
        from bench.record_profile import profile

        print(json.dumps({"profile": profile(canned.read(args.profile))}))
    else:
        run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Memory per in-flight record: what the worker holds per record, over the record's bytes on the wire.

Method: in a fresh interpreter (``python -m bench.memory --child FILE``), the canned responses
(bench/canned.py) are read from a file, and a worker is built as ``consumer run`` builds one
(bench/canned.py: boto3 client on the canned transport, fast parser, ShardConsumer per lease,
function-form processor, LeaseCoordinator on an in-memory leases table) holding one lease per
canned shard. Every consumer is stepped through its parents check and GetShardIterator; then the
collector is tuned (below). Then each consumer takes one step: GetRecords of 1000 records, parsed and
delivered to the processor, whose function form holds them in its buffer uncheckpointed
(``processing.batching``: flush at 10 000 records or after 5 minutes) — the most the worker ever
holds between fetch and checkpoint: shards x worker.max_records records.

- ``memory_per_record_vs_wire`` (goal <= 1.5): ``tracemalloc`` started just before the steps; the
  memory still allocated after them (everything the steps left alive: the records and whatever else
  the worker keeps), divided by the number of records held, over the records' size on the wire
  (the GetRecords bodies' bytes per record).
- ``memory_peak_per_record_vs_wire`` (goal <= 1.5), in a separate fresh process without
  tracemalloc: the kernel's peak-RSS mark is reset (``/proc/self/clear_refs`` 5) before the steps;
  VmHWM after them minus VmRSS before, per record held, over its wire bytes. This is what the
  machine must have: it adds to the held memory what the allocator does not give back and the
  transient parse of a response while it is held (spread over all the records held, so it depends
  on how many shards are held: BENCH_SCALE).
- ``memory_traced_peak_per_record_vs_wire`` (stated beside it): tracemalloc's peak during the steps
  over the same records and bytes: the Python objects' own peak, without the allocator's slack.
Both processes tune the collector as ``Worker.run`` does once start-up is done
(``consumer.runtime.gc_tuning.tune_for_long_running``), as ``consumer run`` runs.
The held form's make-up (Python objects per record) is printed to explain the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import tracemalloc
from typing import Any

from bench import canned, canned_worker
from bench.common import Ratio, at_most, in_fresh_process, machine
from consumer.api.worker import parse_get_records, tune_for_long_running

LIMITS = (
    "each record is held as its JSON bytes (~1.03 x the wire slice, bytes header included) plus a "
    "WireRecord with the fields the worker reads on every record (sequence number, event ID: ~0.3 x), "
    "see the printed make-up; peak RSS adds allocator slack and one record's transient parse (a compact "
    "body is parsed record by record: consumer/streams/wire.py read_compact)."
)
REPEATS = 3


def _status() -> dict[str, int]:
    """VmRSS and VmHWM in bytes, from /proc/self/status."""
    values: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) * 1024
    return values


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def child(path: str, trace: bool) -> dict[str, Any]:
    """Measure in this (fresh) process; the figures as a dict."""
    stream = canned.read(path)
    settings = canned_worker.bench_settings(
        processing={"batching": {"batch_size": 10_000, "max_window_millis": 300_000}},
        worker={"call_process_records_even_for_empty_record_list": True},
    )
    worker = canned_worker.canned_worker(stream, range(stream.shards), settings)
    try:
        consumers = worker.ready_consumers()
        tune_for_long_running()
        if trace:
            tracemalloc.start()
        reset = _reset_peak()
        before = _status()
        traced_before = tracemalloc.get_traced_memory()[0] if trace else 0
        for consumer in consumers:
            consumer.step()
        traced_after, traced_peak = tracemalloc.get_traced_memory() if trace else (0, 0)
        after = _status()
        held = sum(consumer.records_delivered for consumer in consumers)
        checkpoints = {worker.checkpoint_of(consumer.shard_id) for consumer in consumers}
    finally:
        if trace:
            tracemalloc.stop()
        worker.coordinator.stop(release=False)
    assert held == stream.records, (held, stream.records)
    assert checkpoints == {"TRIM_HORIZON"}, (
        f"something was checkpointed, so not everything is held: {checkpoints}"
    )
    baseline = before["VmRSS"] if reset else max(before["VmHWM"], before["VmRSS"])
    return {
        "records": held,
        "wire_bytes": stream.size,
        "rss_before": before["VmRSS"],
        "peak_after": after["VmHWM"],
        "rss_after": after["VmRSS"],
        "growth": after["VmHWM"] - baseline,
        "peak_reset": reset,
        "traced": traced_after - traced_before,
        "traced_peak": traced_peak - traced_before,
    }


def make_up(body: bytes) -> str:
    """What one response's records are held as (objects reachable from each record; shared ones,
    such as the interned event names and the shard ID, counted once)."""
    records = parse_get_records(body, "shardId-00000000000000000000-00000000", 0).records
    seen: set[int] = set()
    sizes: dict[str, int] = {}
    for record in records:
        values = [record] + [getattr(record, name, None) for name in _slots(type(record))]
        for value in values:
            if value is None or id(value) in seen:
                continue
            seen.add(id(value))
            kind = type(value).__name__
            sizes[kind] = sizes.get(kind, 0) + sys.getsizeof(value)
    n = len(records)
    total = sum(sizes.values())
    parts = ", ".join(
        f"{kind} {size / n:,.0f} B" for kind, size in sorted(sizes.items(), key=lambda kv: -kv[1])
    )
    return (
        f"make-up of a held record (mean over {n}): {total / n:,.0f} B of Python objects ({parts}) "
        f"for {len(body) / n:,.0f} B of JSON, i.e. {total / len(body):.2f} x before allocator overhead"
    )


def _slots(cls: type) -> list[str]:
    return [name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ()) if name != "__dict__"]


def run(repeats: int = REPEATS) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    stream = canned.load()
    print(
        f"parameters: {stream.shards} leases x {stream.records_per_response} records in flight "
        f"(BENCH_SCALE=1: 256 x 1000); {stream.describe()}; repeats {repeats}, each in a fresh process"
    )
    print(make_up(stream.bodies[0][0]))
    traced: list[float] = []
    traced_peak: list[float] = []
    rss: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as folder:
        path = os.path.join(folder, "canned.bin")
        canned.write(stream, path)
        print(
            f"{'repeat':>6} | {'held/rec':>9} {'ratio':>6} {'peak/rec':>9} {'ratio':>6} | {'RSS before':>10} {'peak after':>10} "
            f"{'growth/rec':>10} {'ratio':>6} | {'wire/rec':>8}"
        )
        for attempt in range(repeats):
            figures = {}
            for mode in ("--trace", "--rss"):
                figures[mode] = in_fresh_process("bench.memory", "--child", path, mode, timeout=600)
            t, r = figures["--trace"], figures["--rss"]
            wire = t["wire_bytes"] / t["records"]
            held, peak = t["traced"] / t["records"], t["traced_peak"] / t["records"]
            growth = r["growth"] / r["records"]
            traced.append(held / wire)
            traced_peak.append(peak / wire)
            rss.append(growth / wire)
            print(
                f"{attempt + 1:>6} | {held:7,.0f} B {traced[-1]:6.2f} {peak:7,.0f} B {traced_peak[-1]:6.2f} | "
                f"{r['rss_before'] / 2**20:8.0f} MB {r['peak_after'] / 2**20:8.0f} MB {growth:8,.0f} B {rss[-1]:6.2f} | "
                f"{wire:6,.0f} B"
                + ("" if r["peak_reset"] else "  (peak not resettable: baseline is the earlier peak)")
            )
    per_record = stream.size / stream.records
    where = (
        f"{stream.shards} x {stream.records_per_response} records held in the function form's buffer between "
        f"fetch and checkpoint, fresh process"
    )
    ratios = [
        at_most(
            "memory_per_record_vs_wire",
            tuple(traced),
            1.5,
            f"memory left allocated by the steps (tracemalloc) per in-flight record / its GetRecords bytes; {where}; "
            f"{statistics.median(traced) * per_record:,.0f} B per {per_record:,.0f} B record",
        ),
        at_most(
            "memory_peak_per_record_vs_wire",
            tuple(rss),
            1.5,
            f"peak RSS growth per in-flight record / its GetRecords bytes (the held records plus the transient "
            f"parse of a response and allocator slack); {where}; {statistics.median(rss) * per_record:,.0f} B per "
            f"{per_record:,.0f} B record",
        ),
        Ratio(
            "memory_traced_peak_per_record_vs_wire",
            tuple(traced_peak),
            "stated",
            True,
            f"tracemalloc's peak during the steps per in-flight record / its GetRecords bytes (Python objects "
            f"only, no allocator slack); {where}; {statistics.median(traced_peak) * per_record:,.0f} B per "
            f"{per_record:,.0f} B record",
        ),
    ]
    for ratio in ratios:
        print(f"{ratio.name}: {ratio.spread()}")
        print(ratio.line())
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--child", metavar="FILE", help="measure in this process, canned responses from FILE")
    parser.add_argument("--trace", action="store_true", help="with --child: measure with tracemalloc")
    parser.add_argument("--rss", action="store_true", help="with --child: measure peak RSS (the default)")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, trace=args.trace)))
    else:
        run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

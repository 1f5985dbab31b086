"""Memory per in-flight record: what the worker holds per record, over the record's bytes on the wire.

Method: in a fresh interpreter (``python -m bench.memory --child FILE``), the canned responses
(bench/canned.py) are read from a file, and a worker is built as ``consumer run`` builds one
(bench/canned.py: boto3 client on the canned transport, which allocates each response body as
botocore does -- fresh 64 KiB chunks joined into a new body --, fast parser, ShardConsumer per
lease, function-form processor, LeaseCoordinator on an in-memory leases table) holding one lease
per canned shard. Every consumer is stepped through its parents check and GetShardIterator; then
the collector is tuned as ``Worker.run`` tunes it once start-up is done
(``consumer.runtime.gc_tuning.tune_for_long_running``). Then each consumer takes one step:
GetRecords of 1000 records, parsed and delivered to the processor, whose function form holds them
in its buffer uncheckpointed (``processing.batching``: flush at 10 000 records or after 5 minutes)
-- the most the worker ever holds between fetch and checkpoint: shards x worker.max_records
records. Three fills: 1, 4 and every canned shard's lease (32 at the default BENCH_SCALE),
``REPEATS`` fresh processes each.

- ``memory_peak_per_record_vs_wire_<n>_leases`` (goal <= 1.5 at 4 and 32 leases; stated at 1),
  without tracemalloc: the kernel's peak-RSS mark is reset (``/proc/self/clear_refs`` 5) before
  the steps; VmHWM after them minus VmRSS before, per record held, over its wire bytes. This is
  what the machine must have: the held records, what the allocator does not give back, and the
  transient of the last response (its body while it is cut, its chunks while they are joined),
  spread over the records held -- so the fewer leases, the more it weighs: a whole response
  over 1 000 records at 1 lease, over 4 000 at 4.
- ``memory_per_record_vs_wire`` (goal <= 1.5), in a separate fresh process at the full fill:
  ``tracemalloc`` started just before the steps; the memory still allocated after them
  (everything the steps left alive: the records and whatever else the worker keeps), per record
  held, over the records' size on the wire (the GetRecords bodies' bytes per record).
- ``memory_traced_peak_per_record_vs_wire`` (stated beside it): tracemalloc's peak during the
  steps over the same records and bytes: the Python objects' own peak, without the allocator's
  slack.
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
from bench.common import Ratio, at_most, in_fresh_process, machine, stated
from consumer.api.worker import parse_get_records, tune_for_long_running

LIMITS = (
    "each record is held as its JSON bytes (~1.03 x the wire slice, bytes header included) plus a "
    "WireRecord with the fields the worker reads on every record (sequence number, event ID: ~0.3 x), "
    "see the printed make-up; peak RSS adds allocator slack and the last response's transient: its "
    "body while it is cut (a compact body is parsed record by record: consumer/streams/wire.py "
    "read_compact), its chunks while botocore joins them -- a whole response spread over the records "
    "held, so 1.0 x at 1 lease, 0.25 x at 4."
)
REPEATS = 5
FILLS = (1, 4)  # and the full fill: every canned shard


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


def _first(stream: canned.CannedStream, shards: int) -> canned.CannedStream:
    return canned.CannedStream(
        stream.bodies[:shards], stream.last_sequence[:shards], stream.records_per_response, stream.seed
    )


def _peaks(path: str, repeats: int) -> tuple[list[float], list[dict[str, Any]]]:
    """Peak RSS growth per record over wire bytes, one fresh process per repeat."""
    values, runs = [], []
    for _ in range(repeats):
        r = in_fresh_process("bench.memory", "--child", path, "--rss", timeout=600)
        values.append(r["growth"] / r["records"] / (r["wire_bytes"] / r["records"]))
        runs.append(r)
    return values, runs


def run(repeats: int = REPEATS) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    stream = canned.load()
    fills = (*FILLS, stream.shards)
    print(
        f"parameters: {', '.join(map(str, fills))} leases x {stream.records_per_response} records in flight "
        f"(BENCH_SCALE=1: 256 x 1000 at full fill); {stream.describe()}; repeats {repeats}, each in a fresh process"
    )
    print(make_up(stream.bodies[0][0]))
    traced: list[float] = []
    traced_peak: list[float] = []
    peaks: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as folder:
        paths = {}
        for fill in fills:
            paths[fill] = os.path.join(folder, f"canned-{fill}.bin")
            canned.write(_first(stream, fill), paths[fill])
        print(
            f"{'leases':>6} | peak RSS growth per record / its wire bytes, each repeat | RSS before, peak after"
        )
        for fill in fills:
            peaks[fill], runs = _peaks(paths[fill], repeats)
            print(
                f"{fill:>6} | {' '.join(f'{v:5.3f}' for v in peaks[fill])} | "
                + ", ".join(f"{r['rss_before'] / 2**20:.0f}/{r['peak_after'] / 2**20:.0f} MB" for r in runs)
                + (
                    ""
                    if all(r["peak_reset"] for r in runs)
                    else "  (peak not resettable: baseline is the earlier peak)"
                )
            )
        print(
            f"{'repeat':>6} | traced at {stream.shards} leases: {'held/rec':>9} {'ratio':>6} {'peak/rec':>9} {'ratio':>6}"
        )
        for attempt in range(repeats):
            t = in_fresh_process("bench.memory", "--child", paths[stream.shards], "--trace", timeout=600)
            wire = t["wire_bytes"] / t["records"]
            held, peak = t["traced"] / t["records"], t["traced_peak"] / t["records"]
            traced.append(held / wire)
            traced_peak.append(peak / wire)
            print(
                f"{attempt + 1:>6} | {'':19} {held:7,.0f} B {traced[-1]:6.3f} {peak:7,.0f} B {traced_peak[-1]:6.3f}"
            )
    per_record = stream.size / stream.records

    def where(fill: int) -> str:
        return (
            f"{fill} x {stream.records_per_response} records held in the function form's buffer between fetch and "
            f"checkpoint, each response's body allocated as botocore does; {repeats} fresh processes"
        )

    def peak_method(fill: int) -> str:
        return (
            f"peak RSS growth per in-flight record / its GetRecords bytes (the held records, allocator slack, and "
            f"the last response's body and chunks spread over the records held); {where(fill)}; "
            f"{statistics.median(peaks[fill]) * per_record:,.0f} B per {per_record:,.0f} B record"
        )

    full = stream.shards
    ratios = [
        at_most(f"memory_peak_per_record_vs_wire_{full}_leases", tuple(peaks[full]), 1.5, peak_method(full)),
        at_most("memory_peak_per_record_vs_wire_4_leases", tuple(peaks[4]), 1.5, peak_method(4)),
        stated("memory_peak_per_record_vs_wire_1_lease", tuple(peaks[1]), peak_method(1)),
        at_most(
            "memory_per_record_vs_wire",
            tuple(traced),
            1.5,
            f"memory left allocated by the steps (tracemalloc) per in-flight record / its GetRecords bytes; "
            f"{where(full)}; {statistics.median(traced) * per_record:,.0f} B per {per_record:,.0f} B record",
        ),
        stated(
            "memory_traced_peak_per_record_vs_wire",
            tuple(traced_peak),
            f"tracemalloc's peak during the steps per in-flight record / its GetRecords bytes (Python objects "
            f"only, no allocator slack); {where(full)}; {statistics.median(traced_peak) * per_record:,.0f} B per "
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

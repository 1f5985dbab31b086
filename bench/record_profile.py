"""Where the worker's CPU per record goes, beyond the floor (bench/record_cpu.py prints both).

``stages_line``: perf-counter stages, per record: the fresh process's floors (whole bodies, each
record's bytes), then in the tuned worker's process ``orjson.loads`` of whole bodies,
``parse_get_records`` alone (cut, parse each record, hold it) and the full step (plus one botocore
call per response, the lifecycle, the function form and the checkpoint). No profiler overhead, so
these are the figures to quote.

``profile``: a cProfile of the full step in a fresh process (``python -m bench.record_cpu
--profile FILE``), collector tuned as ``Worker.run`` tunes it: the functions by own time and the
stages by cumulative time. cProfile's per-call overhead inflates the many-small-calls parts
(botocore's handlers, the lifecycle) relative to orjson; and a function's own time includes
freeing what its frame held when it returns (``get_records``' own time is mostly freeing the parsed
response, which the floor pays as well).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
from pathlib import Path

from bench import canned, canned_worker
from consumer.api.worker import tune_for_long_running

ROOT = Path(__file__).resolve().parents[1]
PREFIX = str(ROOT) + "/"
PROFILE_SHARDS = 8
STAGES = {
    "botocore call (serialise, sign, handlers)": ("botocore/client.py", "_make_api_call"),
    "fast parse (parse_get_records)": ("consumer/streams/wire.py", "parse_get_records"),
    "  of which holding each record from its fields (msgspec)": ("consumer/streams/held_fields.py", "hold"),
    "  of which orjson.loads (the last record of each response)": ("~", "<orjson.loads>"),
    "delivery (ShardConsumer._deliver)": ("consumer/lifecycle/shard_consumer.py", "_deliver"),
    "  of which the function form": ("consumer/processing/function_processor.py", "process_records"),
    "checkpoint (ShardCheckpointer)": ("consumer/lifecycle/checkpointer.py", "checkpoint"),
}


def stages_line(runs: list[dict[str, float]]) -> str:
    """The medians of the perf-counter stages over the repeats, µs per record."""

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs) * 1e6

    fresh, each = median("fresh_orjson"), median("fresh_orjson_each")
    loads, parse, worker = median("orjson_in_heap"), median("parse_in_heap"), median("worker")
    return (
        f"stages (medians, CPU µs per record): fresh process: orjson.loads of whole bodies {fresh:.1f}, of each "
        f"record's bytes {each:.1f}; in the tuned worker's process, after it ran: orjson.loads of whole bodies "
        f"{loads:.1f}, parse_get_records (cut, parse each record, hold it) {parse:.1f}; the full step {worker:.1f} "
        f"(beyond parse_get_records: botocore call, lifecycle, function form, checkpoint {worker - parse:+.1f})"
    )


def profile(stream: canned.CannedStream, shards: int = PROFILE_SHARDS) -> str:
    """cProfile of the tuned worker's step on the first ``shards`` shards: own time and stages."""
    small = canned.CannedStream(
        stream.bodies[:shards], stream.last_sequence[:shards], stream.records_per_response, stream.seed
    )
    worker = canned_worker.canned_worker(small, range(small.shards))
    try:
        consumers = worker.ready_consumers()
        tune_for_long_running()
        profiler = cProfile.Profile()
        profiler.enable()
        for consumer in consumers:
            consumer.step()
        profiler.disable()
    finally:
        worker.coordinator.stop(release=False)
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    table = stats.stats  # type: ignore[attr-defined]
    rows = sorted(table.items(), key=lambda kv: kv[1][2], reverse=True)[:12]
    lines = [
        f"profile of (a), fresh process, tuned gc, {small.records:,} records, top functions by own time (of {total:.2f} s):"
    ]
    for (filename, line, name), (_, calls, own, _cumulative, _) in rows:
        where = filename.rsplit("/site-packages/", 1)[-1].removeprefix(PREFIX)
        lines.append(f"  {100 * own / total:5.1f} %  {calls:>7} calls  {name} ({where}:{line})")
    cumulative = {(f, n): row[3] for (f, _, n), row in table.items()}
    for label, (suffix, function) in STAGES.items():
        spent = sum(t for (f, n), t in cumulative.items() if n == function and f.endswith(suffix))
        lines.append(f"  stage: {label:45} {100 * spent / total:5.1f} % (cumulative)")
    return "\n".join(lines)

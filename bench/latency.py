"""Latency: write -> processor, p50 and p99 at a steady 200 writes/s, over idle_time_between_reads.

Method: the emulator serves a 4-partition stream (the local environment's shape); 2 ``consumer run``
processes share it with the local environment's timings (idle time between reads 200 ms, failover
3000 ms) and a processor that notes, for every record it is given, the wall-clock time it arrived
and lands the batch with the product's changelog sink. A writer puts 200 items/s from 8 threads
(round-robin over one key per partition, so each shard gets 50/s); each item carries ``t``, the
writer's wall-clock time just before its PutItem was sent (same machine, same clock); slots the
writer misses while the machine is busy are skipped, not made up in bursts. After a 2 s warm-up,
3 windows of 10 s each: latency = arrival at the processor - ``t`` for every write sent in
the window; p50 and p99 per window, divided by idle_time_between_reads. Goal: p99 <= 2 idle times
(a record waits at most one idle time for the next poll, plus the GetRecords call and the batch in
front of it). Also shown: write -> landed in the change log (the sink's ``landedAt``), the PutItem
round trip at the writer, and the write rate actually sustained.
"""

from __future__ import annotations

import time

from bench.common import Ratio, at_most
from bench.fleet_load import percentile, spread
from bench.fleet_records import Delivery, read_landed
from bench.fleet_support import bench_stack

SHARDS = 4
WORKERS = 2
WRITES_PER_SECOND = 200
WRITER_THREADS = 8
WARM_UP_SECONDS = 2.0
WINDOW_SECONDS = 10.0
WINDOWS = 3
WORKER = {
    "failover_time_millis": 3000,
    "max_clock_skew_millis": 100,
    "idle_time_between_reads_millis": 200,
    "shard_sync_interval_millis": 60_000,
    "parent_shard_poll_interval_millis": 500,
    "task_backoff_time_millis": 100,
}
GOAL = 2.0
LIMITS = (
    "a record waits up to one idle time for its shard's next poll, then for the GetRecords call and the "
    "processor (JSON line + the changelog object written and fsynced per batch) and the checkpoint "
    "before the next poll is scheduled; on this shared 2-core machine the emulator, 2 workers and the "
    "writer compete for CPU, which stretches every call in that chain (see the PutItem round trip)."
)


def _window(deliveries: list[Delivery], start: float, end: float) -> list[float]:
    first: dict[tuple[str, str], Delivery] = {}
    for d in deliveries:
        if d.written is not None and start <= d.written < end:
            key = (d.shard, d.seq)
            if key not in first or d.arrived < first[key].arrived:
                first[key] = d
    return [d.arrived - (d.written or 0.0) for d in first.values()]


def run() -> list[Ratio]:
    print(__doc__)
    began = time.monotonic()
    with bench_stack("latency", partitions=SHARDS, worker=WORKER) as stack:
        idle = stack.settings.worker.idle_time_between_reads_millis / 1000
        print(
            f"parameters: {SHARDS} shards, {WORKERS} workers, idle between reads "
            f"{stack.settings.worker.idle_time_between_reads_millis} ms, max_records "
            f"{stack.settings.worker.records_per_read(stack.settings.source.max_records_per_read)}, writes {WRITES_PER_SECOND}/s from {WRITER_THREADS} threads, "
            f"{WINDOWS} windows of {WINDOW_SECONDS:g} s after {WARM_UP_SECONDS:g} s of warm-up"
        )
        for _ in range(WORKERS):
            stack.fleet.start_worker()
        stack.wait_balanced(60, SHARDS)
        time.sleep(1.0)
        counters_before = stack.emulator.control.counters()
        writer = stack.writer(WRITES_PER_SECOND, threads=WRITER_THREADS).start()
        try:
            time.sleep(WARM_UP_SECONDS)
            windows = []
            for _ in range(WINDOWS):
                start = time.time()
                time.sleep(WINDOW_SECONDS)
                windows.append((start, time.time()))
        finally:
            writer.stop()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stack.deliveries.poll()
            arrived = {(d.key, d.w) for d in stack.deliveries.all}
            if all(k in arrived for k in writer.acked):
                break
            time.sleep(0.25)
        counters = stack.emulator.control.counters()
        deliveries = stack.deliveries.all
        landed = read_landed(stack.changelog)
        problems = stack.problems()

    written_at = {(d.shard, d.seq): d.written for d in deliveries if d.written is not None}
    p50s: list[float] = []
    p99s: list[float] = []
    for n, (start, end) in enumerate(windows, 1):
        latencies = _window(deliveries, start, end)
        in_window = sum(1 for at in writer.acked.values() if start <= at < end)
        to_log = [
            x.landed - written_at[(x.shard, x.seq)]
            for x in landed
            if (x.shard, x.seq) in written_at and start <= written_at[(x.shard, x.seq)] < end
        ]
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        p50s.append(p50 / idle)
        p99s.append(p99 / idle)
        print(
            f"  window {n}: {in_window / (end - start):.0f} writes/s acknowledged, {len(latencies)} delivered; "
            f"write -> processor p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max "
            f"{max(latencies) * 1000:.0f} ms; -> change log p50 {percentile(to_log, 50) * 1000:.0f} ms, "
            f"p99 {percentile(to_log, 99) * 1000:.0f} ms"
        )
    trips = writer.round_trips
    print(
        f"writer: {len(writer.acked)} acknowledged over the run ({writer.achieved_rate():.0f}/s of "
        f"{WRITES_PER_SECOND}/s asked, {writer.errors} errors); PutItem round trip p50 "
        f"{percentile(trips, 50) * 1000:.1f} ms, p99 {percentile(trips, 99) * 1000:.1f} ms"
    )
    calls = {k: counters.get(k, 0) - counters_before.get(k, 0) for k in ("calls_GetRecords", "throttled")}
    print(
        f"emulator during the run: {calls['calls_GetRecords']} GetRecords, {calls['throttled']} throttled; "
        f"writer slots skipped because the machine was busy: {writer.skipped}"
    )
    lost = [k for k in writer.acked if k not in {(d.key, d.w) for d in deliveries}]
    print(f"lost (acknowledged, never delivered): {len(lost)}")
    print(f"p50 / idle: {spread(p50s)}; p99 / idle: {spread(p99s)}")
    if problems:
        print(f"ERROR lines in worker logs ({len(problems)}): {problems[:5]}")
    print(f"(latency benchmark took {time.monotonic() - began:.0f} s)")
    sustained = writer.achieved_rate()
    method = (
        f"write -> processor p99 over idle_time_between_reads ({idle * 1000:.0f} ms); {SHARDS} shards, "
        f"{WORKERS} workers, {sustained:.0f} writes/s sustained of {WRITES_PER_SECOND} asked; "
        f"p50/idle {spread(p50s, '{:.2f}')}; {WINDOWS} windows of {WINDOW_SECONDS:g} s"
    )
    return [at_most("latency_p99_over_idle_time", tuple(p99s), GOAL, method)]


if __name__ == "__main__":
    for ratio in run():
        print(ratio.line())

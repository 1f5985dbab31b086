"""Throughput per worker process: records/s of a worker holding 256 leases, over orjson alone.

Method: one forked process builds what ``consumer run`` builds (bench/canned.py: LeaseCoordinator
with its heartbeat and taker threads on an in-memory leases table, the real Scheduler with KCL's
default settings — 16 threads, max_records 1000, idle 1 s —, ShardReader over DynamoDBStreamSource
over a real boto3 client on the canned transport, the function-form no-op processor, a checkpoint
after every batch) and takes 256 leases. Lease ``i`` starts at canned shard ``i % shards`` and goes
on into the next canned shards (``chain``), so every lease has backlog for the whole window: each
GetRecords in it returns 1000 records (the empty ones are counted and printed).
The floor is the cheapest parse a user could run instead, timed in a fresh interpreter that imports
only orjson (``python -m bench.fresh_orjson``, as bench/record_cpu.py's per-record floor): each
response body cut into its records and ``orjson.loads`` of each record's own bytes, in records per
CPU-second of that single-threaded parse; measured before and after each one-process run, the faster
kept (a floor slowed by another job would flatter the worker). The worker process starts the
scheduler, waits until every lease's consumer is past GetShardIterator
(and at least 0.5 s), and measures records/s over the next 3 s of wall time: records in the
batches done (processed and checkpointed) between the first and the last batch done in the
window, over the time between them (batch completions are timestamped on the worker's threads by
a pass-through wrapper around the processor). Also printed: the CPU the process used per second
of window, and records per CPU-second of the worker.
Then the same with 2 processes started together (a barrier), 128 leases each (each its own
in-memory leases table: the lease protocol between them is not exercised), measuring over the same
window of system-wide monotonic time; their records/s are summed. Ratios: 1-process records/s over
the floor's records/s (goal >= 0.5), and 2-process aggregate over 1-process (goal >= 1.5, set before
measuring: two processes have two GILs on two cores).
"""

from __future__ import annotations

import gc
import multiprocessing
import statistics
import tempfile
import threading
import time
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import SynchronizedArray
from multiprocessing.synchronize import Barrier
from typing import Any

from bench import canned, canned_worker
from bench.common import Ratio, at_least, in_fresh_process, machine
from consumer.api.worker import ShardState
from consumer.processing import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownRequestedInput,
)

LIMITS = (
    "throughput_vs_orjson_each_record: one process runs its shard consumers on threads under one GIL, "
    "so it uses at most one core; its records/s is the floor's divided by the worker's CPU per record "
    "over the floor's (record_cpu) and by the scheduler's own overhead (heap, thread hand-offs). "
    "two_process_scaling: two processes can only double one when each gets a core of its own; on this "
    "shared 2-vCPU VM (KVM; other jobs running) they got less than 2 cores in the window, and each "
    "CPU-second did less work than with one process running (shared L3 and memory bandwidth, and "
    "possibly SMT siblings on the host); both are printed per run and in the method column. "
    "A second process per core (fleet.worker_processes_per_instance) is how the fleet uses more cores."
)
LEASES = 256
WARMUP_SECONDS = 0.5
WINDOW_SECONDS = 3.0
REPEATS = 3
CHILD_TIMEOUT = 120.0


class _Timed:
    """Instrumentation only: passes every call to the worker's processor, and notes when each batch
    was done (processed and checkpointed) and how many records it had, on the worker's own thread."""

    def __init__(self, inner: RecordProcessor, done: list[tuple[float, int]]) -> None:
        self._inner = inner
        self._done = done

    def initialize(self, initialization: InitializationInput) -> None:
        self._inner.initialize(initialization)

    def process_records(self, process: ProcessRecordsInput) -> None:
        self._inner.process_records(process)
        self._done.append((time.perf_counter(), len(process.records)))

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        self._inner.shard_ended(shard_ended)

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        self._inner.lease_lost(lease_lost)

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        self._inner.shutdown_requested(shutdown)


def _rate(done: list[tuple[float, int]], start: float, end: float) -> tuple[float, int]:
    """Records/s between the first and the last batch done inside [start, end] (so a window's edges
    cutting a batch do not bias it), and the records counted."""
    inside = sorted(d for d in done if start <= d[0] <= end)
    if len(inside) < 2:
        raise RuntimeError("fewer than two batches were done in the window: nothing to measure")
    records = sum(n for _, n in inside[1:])
    return records / (inside[-1][0] - inside[0][0]), records


def _floor(path: str) -> float:
    """Records per CPU-second of ``orjson.loads`` of each record's own bytes, the cut included, in a
    fresh interpreter (bench/fresh_orjson.py) over the canned bodies saved at ``path``."""
    floor = in_fresh_process("bench.fresh_orjson", path, timeout=300)
    return float(floor["records"]) / float(floor["per_record_seconds"])


def _measure(
    stream: canned.CannedStream,
    leases: list[int],
    index: int,
    barrier: Barrier,
    ready: SynchronizedArray[float],
    results: Queue[Any],
) -> None:
    """In a child process: one worker over ``leases``; puts a dict of figures on ``results``.

    Every process's window is the same stretch of (system-wide monotonic) time: it starts a margin
    after the last process saw all its consumers past GetShardIterator (``ready``: each process's
    time, 0 until then), and at least WARMUP_SECONDS after the start."""
    try:
        done: list[tuple[float, int]] = []
        worker = canned_worker.canned_worker(
            stream, leases, chain=True, wrap=lambda factory: lambda shard: _Timed(factory(shard), done)
        )
        scheduler = worker.scheduler
        figures: dict[str, Any] = {"leases": len(leases)}
        gc.collect()
        barrier.wait(timeout=CHILD_TIMEOUT)
        stop = threading.Event()
        runner = threading.Thread(target=scheduler.run, args=(stop,), name="scheduler")
        began = time.perf_counter()
        runner.start()
        while not all(ready[:]):
            time.sleep(0.02)
            if not ready[index]:
                consumers = scheduler.consumers().values()
                if len(consumers) == len(leases) and all(
                    c.life.state not in (ShardState.WAITING_ON_PARENT_SHARDS, ShardState.INITIALIZING)
                    for c in consumers
                ):
                    ready[index] = time.perf_counter()
            if time.perf_counter() - began > CHILD_TIMEOUT / 2:
                raise RuntimeError("consumers not initialised in time")
        start = max(max(ready[:]) + 0.1, began + WARMUP_SECONDS)
        end = start + WINDOW_SECONDS
        time.sleep(max(0.0, start - time.perf_counter()))
        calls0, empty0 = worker.transport.get_records_calls, worker.transport.empty_responses
        cpu0, t0 = time.process_time(), time.perf_counter()
        time.sleep(max(0.0, end - time.perf_counter()))
        cpu1, t1 = time.process_time(), time.perf_counter()
        calls, empty = worker.transport.get_records_calls - calls0, worker.transport.empty_responses - empty0
        stop.set()
        runner.join(timeout=CHILD_TIMEOUT / 2)
        worker.coordinator.stop(release=False)
        rate, records = _rate(done, start, end)
        figures.update(
            rate=rate,
            cpu=(cpu1 - cpu0) / (t1 - t0),
            records=records,
            start=start,
            end=end,
            warmup=start - began,
            calls=calls,
            empty=empty,
        )
        results.put(figures)
    except BaseException as exc:
        results.put({"error": repr(exc)})
        raise


def _run_processes(stream: canned.CannedStream, groups: list[list[int]]) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("fork")  # children share the canned bytes with the parent
    barrier = context.Barrier(len(groups))
    ready = context.Array("d", len(groups))
    results: Queue[Any] = context.Queue()
    processes = [
        context.Process(target=_measure, args=(stream, group, i, barrier, ready, results), daemon=True)
        for i, group in enumerate(groups)
    ]
    for process in processes:
        process.start()
    figures = [results.get(timeout=CHILD_TIMEOUT) for _ in processes]
    for process in processes:
        process.join(timeout=CHILD_TIMEOUT)
    errors = [f["error"] for f in figures if "error" in f]
    if errors:
        raise RuntimeError(f"a measuring process failed: {errors[0]}")
    return figures


def run(repeats: int = REPEATS) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    stream = canned.load()
    print(
        f"parameters: {LEASES} leases over {stream.describe()}; warm-up >= {WARMUP_SECONDS:g} s, "
        f"window {WINDOW_SECONDS:g} s; repeats {repeats}"
    )
    one: list[float] = []
    floors: list[float] = []
    two: list[float] = []
    cores: list[float] = []
    efficiency: list[float] = []
    with tempfile.NamedTemporaryFile(prefix="throughput-floor-", suffix=".bin") as floor_file:
        canned.write(stream, floor_file.name)
        print(
            f"{'repeat':>6} | {'1 proc rec/s':>12} {'CPU/wall':>8} {'floor rec/s':>11} {'ratio':>6} | "
            f"{'2 procs rec/s':>13} {'CPU/wall':>9} {'scaling':>7}"
        )
        for attempt in range(repeats):
            before = _floor(floor_file.name)
            (single,) = _run_processes(stream, [list(range(LEASES))])
            after = _floor(floor_file.name)
            pair = _run_processes(stream, [list(range(0, LEASES, 2)), list(range(1, LEASES, 2))])
            one.append(single["rate"])
            # The faster of the two: a floor slowed by another job's burst would flatter the worker.
            floors.append(max(before, after))
            two.append(sum(f["rate"] for f in pair))
            cores.append(sum(f["cpu"] for f in pair))
            # Records per CPU-second with two processes running, over the same with one.
            efficiency.append((two[-1] / cores[-1]) / (single["rate"] / single["cpu"]))
            pair_cpu = "+".join(f"{f['cpu']:.2f}" for f in pair)
            print(
                f"{attempt + 1:>6} | {single['rate']:12,.0f} {single['cpu']:8.2f} {floors[-1]:11,.0f} "
                f"{single['rate'] / floors[-1]:6.2f} | {two[-1]:13,.0f} "
                f"{pair_cpu:>9} {two[-1] / one[-1]:7.2f}"
                f"   (records per CPU-second, 2 procs / 1: {efficiency[-1]:.2f}; empty GetRecords in window {single['empty']}/{single['calls']} and "
                f"{sum(f['empty'] for f in pair)}/{sum(f['calls'] for f in pair)}; floor "
                f"{before:,.0f} before, {after:,.0f} after; worker per CPU-second "
                f"{single['rate'] / single['cpu']:,.0f}; warm-up {single['warmup']:.1f} s)"
            )
    rate, floor_rate = statistics.median(one), statistics.median(floors)
    print(
        f"figures (medians): 1 process {rate:,.0f} records/s, floor {floor_rate:,.0f} records/s, "
        f"2 processes {statistics.median(two):,.0f} records/s"
    )
    ratios = [
        at_least(
            "throughput_vs_orjson_each_record",
            tuple(r / f for r, f in zip(one, floors, strict=True)),
            0.5,
            f"records/s of one worker process (256 leases, real Scheduler, 16 threads, canned responses through "
            f"boto3 + fast parser, no-op processor, checkpoints) / records per CPU-second of orjson.loads of each "
            f"record's own bytes, cut included, in a fresh interpreter (bench.fresh_orjson), same bodies; "
            f"{rate:,.0f} vs {floor_rate:,.0f} records/s",
        ),
        at_least(
            "two_process_scaling",
            tuple(t / o for t, o in zip(two, one, strict=True)),
            1.5,
            f"aggregate records/s of 2 worker processes (128 leases each) / 1 process (256 leases), "
            f"2-core machine; {statistics.median(two):,.0f} vs {rate:,.0f} records/s; the 2 got "
            f"{statistics.median(cores):.2f} of 2 cores, and did {statistics.median(efficiency):.2f} x the "
            f"records per CPU-second of 1",
        ),
    ]
    for ratio in ratios:
        print(f"{ratio.name}: {ratio.spread()}")
        print(ratio.line())
    return ratios


if __name__ == "__main__":
    run()

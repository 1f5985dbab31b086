"""What a worker's shards cost in CPU: an idle shard per second of wall time, against a busy one;
and what the garbage-collector tuning of ``consumer run`` saves per record.

Idle shards: one process runs the real Scheduler with the product's default worker settings (idle
time 1 s backing off to 10 s) over ``IDLE_MANY`` leases whose canned shards are read to their end
and then answer empty (through boto3: signing, retries, parsing, as on AWS, without a socket), and
another over ``IDLE_FEW``; both wait out the back-off, then measure process CPU over the same window.
The marginal CPU per idle shard is (many - few) / (IDLE_MANY - IDLE_FEW): the coordinator's threads
and the scheduler's own loop cost the same in both and drop out. Per-poll CPU is the same difference
over the extra empty GetRecords answers, so a fixed 1 s poll (the old rule) costs per-poll x 1/s.

Busy shard: CPU per record of one shard consumer stepping full canned responses (1 000 records of
~1.2 KB, no-op function-form processor, checkpoints) times 1 000 records/s, the most one DynamoDB
partition writes (1 000 WCU/s).

GC: the same busy stepping in two fresh processes that first build a heap of 64 x 1 000 records
parsed into Python objects (~0.8 GB, a quarter of the issue's 256-shard case), one with CPython's default collector settings and one after
``consumer.runtime.gc_tuning.tune_for_long_running`` (what ``Worker.run`` calls after start-up).
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from multiprocessing.queues import Queue
from typing import Any

from bench import canned, canned_worker
from bench.common import Ratio, at_most, machine
from consumer.api.worker import ShardState

IDLE_MANY = 200
IDLE_FEW = 20
IDLE_SETTLE_SECONDS = 20.0  # 1 + 2 + 4 + 8 s of back-off, then the 10 s period
IDLE_WINDOW_SECONDS = 30.0
PARTITION_RECORDS_PER_SECOND = 1000
BUSY_RESPONSES = 24
HEAP_LEASES = 64
REPEATS = 3
CHILD_TIMEOUT = 300.0

LIMITS = (
    "idle_shard_cpu_ms_per_second: the back-off trades an idle shard's CPU (and its billed empty reads) "
    "for the delay of its first record after a quiet spell, up to max_idle_time_between_reads_millis "
    "(10 s by default); a table whose quiet shards must react within 1 s sets it to 1000 and pays "
    "per-poll CPU x 1/s per idle shard (stated in the method column)."
)


def _idle_child(leases: int, results: Queue[Any]) -> None:
    try:
        stream = canned.generate(8, records_per_response=50)
        worker = canned_worker.canned_worker(stream, list(range(leases)))
        scheduler = worker.scheduler
        import threading

        stop = threading.Event()
        runner = threading.Thread(target=scheduler.run, args=(stop,), name="scheduler", daemon=True)
        runner.start()
        deadline = time.monotonic() + CHILD_TIMEOUT / 2
        while True:
            consumers = scheduler.consumers().values()
            if len(consumers) == leases and all(c.life.state is ShardState.PROCESSING for c in consumers):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("consumers not processing in time")
            time.sleep(0.05)
        time.sleep(IDLE_SETTLE_SECONDS)
        empty0, cpu0, t0 = worker.transport.empty_responses, time.process_time(), time.monotonic()
        time.sleep(IDLE_WINDOW_SECONDS)
        empty1, cpu1, t1 = worker.transport.empty_responses, time.process_time(), time.monotonic()
        stop.set()
        runner.join(timeout=30)
        worker.coordinator.stop(release=False)
        results.put({"cpu": cpu1 - cpu0, "wall": t1 - t0, "empty": empty1 - empty0})
    except BaseException as exc:
        results.put({"error": repr(exc)})


def _busy_child(tuned: bool, heap: bool, results: Queue[Any]) -> None:
    try:
        import gc

        from consumer.api.worker import tune_for_long_running

        stream = canned.generate(2, records_per_response=1000, responses_per_shard=BUSY_RESPONSES // 2)
        in_flight = []
        if heap:  # a large, long-lived heap: batches held as Python objects, as a loaded worker has
            import orjson

            body_stream = canned.generate(8, records_per_response=1000)
            for index in range(HEAP_LEASES):
                in_flight.append(orjson.loads(body_stream.bodies[index % 8][0]))
        worker = canned_worker.canned_worker(stream, [0], start=False, chain=True)
        (consumer,) = worker.ready_consumers()
        if tuned:
            tune_for_long_running()
        else:
            gc.collect()
        consumer.step()  # warm
        delivered0, cpu0 = consumer.records_delivered, time.process_time()
        while consumer.records_delivered - delivered0 < (BUSY_RESPONSES - 2) * 1000:
            consumer.step()
        cpu = time.process_time() - cpu0
        results.put({"per_record": cpu / (consumer.records_delivered - delivered0), "held": len(in_flight)})
    except BaseException as exc:
        results.put({"error": repr(exc)})


def _in_child(target: Any, *args: Any) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    results: Queue[Any] = context.Queue()
    process = context.Process(target=target, args=(*args, results))
    process.start()
    try:
        figures: dict[str, Any] = results.get(timeout=CHILD_TIMEOUT)
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
    if "error" in figures:
        raise RuntimeError(f"{target.__name__}{args}: {figures['error']}")
    return figures


def run(repeats: int = REPEATS) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    idle_ms: list[float] = []
    ratio_to_busy: list[float] = []
    per_poll_ms: list[float] = []
    gc_ratio: list[float] = []
    busy_ms: list[float] = []
    for attempt in range(repeats):
        many = _in_child(_idle_child, IDLE_MANY)
        few = _in_child(_idle_child, IDLE_FEW)
        extra_cpu = many["cpu"] / many["wall"] - few["cpu"] / few["wall"]  # CPU-s per wall-s
        per_shard = 1000 * extra_cpu / (IDLE_MANY - IDLE_FEW)  # ms of CPU per wall-second
        polls = many["empty"] / many["wall"] - few["empty"] / few["wall"]  # extra empty polls per s
        poll_ms = 1000 * extra_cpu / polls if polls > 0 else float("nan")
        default = _in_child(_busy_child, False, True)
        tuned = _in_child(_busy_child, True, True)
        busy = default["per_record"] * 1000 * PARTITION_RECORDS_PER_SECOND  # ms CPU per wall-s
        idle_ms.append(per_shard)
        busy_ms.append(busy)
        ratio_to_busy.append(per_shard / busy)
        per_poll_ms.append(poll_ms)
        gc_ratio.append(tuned["per_record"] / default["per_record"])
        print(
            f"repeat {attempt + 1}: idle shard {per_shard:.4f} ms CPU/s ({polls / (IDLE_MANY - IDLE_FEW):.3f} "
            f"polls/s each, {poll_ms:.3f} ms per empty poll); busy shard {busy:.0f} ms CPU/s "
            f"({1e6 * default['per_record']:.1f} µs/record default GC, {1e6 * tuned['per_record']:.1f} tuned, "
            f"{default['held']} batches held); idle/busy {per_shard / busy:.2e}",
            flush=True,
        )
    poll = statistics.median(per_poll_ms)
    return [
        at_most(
            "idle_shard_cpu_ms_per_second",
            tuple(idle_ms),
            0.1,
            f"marginal process CPU of {IDLE_MANY} vs {IDLE_FEW} idle leases, real Scheduler, default settings "
            f"(1 s idle backing off to 10 s), {IDLE_WINDOW_SECONDS:g} s window after {IDLE_SETTLE_SECONDS:g} s; "
            f"{statistics.median(ratio_to_busy):.1e} of a busy shard's {statistics.median(busy_ms):.0f} ms/s "
            f"({PARTITION_RECORDS_PER_SECOND} records/s, no-op processor); {poll:.3f} ms per empty poll, so a "
            f"fixed 1 s poll costs {poll:.3f} ms/s",
        ),
        at_most(
            "record_cpu_tuned_gc_over_default",
            tuple(gc_ratio),
            0.9,
            f"CPU per record stepping full canned responses with {HEAP_LEASES} x 1000 parsed records held, "
            "after consumer.runtime.gc_tuning.tune_for_long_running / with CPython's default collector",
        ),
    ]


if __name__ == "__main__":
    for ratio in run():
        print(ratio.line())

"""The whole worker under the fault model, long form: tens of thousands of seeded histories.

Method: simulation/ (the model; tests/simulation holds its tests; the short form runs 50 histories with half the chaos in ``make test``).
Each history runs three workers (more join during the chaos) as the product assembles them — lease
coordinator, shard sync, the scheduler with its shard consumers and checkpointer, and a processor
built by the product's registry: the function form on one lane or on ten, tumbling windows, the
class form or the change-log sink, cycling with the seed, with retries, bisection, a dead letter,
poison and flaky records and slow calls — on simulated threads for a minute of chaos: the product's
DynamoDB lease store on a model of DynamoDB's API (simulation/dynamodb_api.py) that is slow with a long
tail, stale on scan pages, throttling, failing and out of reach (alone or in storms of a few seconds),
and answering committed writes with a 500 or not in time, behind botocore's retries as the leases
client is configured; a stream that throttles, answers 500s, expires iterators and trims records, while its
shards roll over and split; an S3 bucket and a window-state table that are slow, refuse writes, and
land writes that still fail; whole processes stopped just before a call goes out; workers paused
(mostly 0.2-2.5 x failover, one pause in five 2.5-8 x), killed, stopped gracefully and added; clocks
skewed — then calm. The checker counts, per history: two owners of one shard at once, a record
handled while the table named another owner, a checkpoint moving back, a finished shard leased
again, a shard not finished within five minutes of the calm, a take sent by a fenced worker, a
record lost (neither handled, dead-lettered nor trimmed), an item's changes first handled out of
order, a record handled twice while its shard stayed with one worker, a checkpoint committed before
a record up to it was done, a window's state counting a record twice or not at all, a dead letter
holding a record that did not exhaust its retries (or missing one that did), and a crash of any
simulated thread. The ratio is histories with any violation over histories run (goal: 0). Seeds
1 000 000 and up, so they do not repeat the short form's. ``BENCH_SCALE`` scales the count (default
20 000).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time

from bench.common import Ratio

HISTORIES = 20_000
FIRST_SEED = 1_000_000
LIMITS = (
    "the fault model is ours: DynamoDB's, DynamoDB Streams' and S3's real latency tails, staleness "
    "and ambiguity rates are not published, so the rates are chosen harsh (up to 15 % of attempts throttled, 15 % "
    "ambiguous writes, storms of up to failover/2 in which every attempt fails, scans a whole failover "
    "stale, calls up to a failover slow) rather than measured; the leases table's API is our model of "
    "it (checked against moto request by request, and botocore's retry rules); the processors are ours, written as careful users write them (a side effect only while "
    "the lease is held); the emulator's end-to-end runs and the chaos demo cover the real boundaries."
)


def _one(seed: int) -> tuple[str | None, float]:
    from simulation.histories import KINDS, history

    logging.disable(logging.CRITICAL)
    started = time.monotonic()
    kind = KINDS[seed % len(KINDS)]
    _, verdict = history(seed, kind=kind)
    elapsed = time.monotonic() - started
    return (None if verdict.ok else f"seed {seed} ({kind}): {verdict}"), elapsed


def run() -> list[Ratio]:
    print(__doc__)
    scale = float(os.environ.get("BENCH_SCALE", "1"))
    count = max(1, int(HISTORIES * scale))
    seeds = range(FIRST_SEED, FIRST_SEED + count)
    started = time.monotonic()
    failures: list[str] = []
    times: list[float] = []
    with multiprocessing.get_context("fork").Pool(processes=max(1, min(2, os.cpu_count() or 1))) as pool:
        for index, (failure, elapsed) in enumerate(pool.imap_unordered(_one, seeds, chunksize=20), 1):
            times.append(elapsed)
            if failure is not None:
                failures.append(failure)
                print("VIOLATION", failure[:600], flush=True)
            if index % 1000 == 0:
                print(f"{index} of {count} histories: {len(failures)} with a violation", flush=True)
    elapsed = time.monotonic() - started
    times.sort()
    print(
        f"{count} histories in {elapsed:.0f} s ({times[len(times) // 2]:.2f} s median, {times[-1]:.2f} s "
        f"longest, in each of 2 processes): {len(failures)} with a violation"
    )
    seeds_broken = ", ".join(f.split(" ", 2)[1] for f in failures)
    method = (
        f"{count} seeded whole-worker histories under the fault model (bench/whole_worker.py): "
        f"{len(failures)} with a violation" + (f" (seeds {seeds_broken})" if failures else "")
    )
    # The count, not the share: 2 of 20 000 printed as 0.000 beside "short".
    return [Ratio("whole_worker_histories_violating", (float(len(failures)),), "=0", not failures, method)]

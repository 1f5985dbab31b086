"""The lease protocol under the fault model, long form: tens of thousands of seeded histories.

Method: tests/simulation (the short form runs 200 histories in ``make test``). Each history runs three
workers (more join during the chaos), each with the real LeaseCoordinator and ShardSyncer on simulated
threads for a minute of chaos — a leases table that is slow with a long tail (up to a failover
period, mostly before the commit), stale on scans (up to a failover period), throttling and answering
committed writes with a 500 (retried) or a timeout; whole processes stopped just before a call goes
out; workers paused (mostly 0.2-2.5 x failover, one pause in five 2.5-8 x), killed and added; clocks
skewed — then calm. The checker counts, per history: two owners of one shard at once, a checkpoint
moving back, a finished shard leased again, a record never delivered or delivered before its parent
finished, a shard not finished within five minutes of the calm, a take sent by a fenced worker, a
delivery by a worker the table did not name as the owner at that moment, and a record processed
twice while the shard stayed with one worker. The
ratio is histories with any violation over histories run (goal: 0). Seeds 1 000 000 and up, so they
do not repeat the short form's. ``BENCH_SCALE`` scales the count (default 20 000).
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
    "the fault model is ours: DynamoDB's real latency tail, staleness and ambiguity rates are not "
    "published, so the rates are chosen harsh (up to 15 % throttled, 15 % ambiguous writes, scans a "
    "whole failover stale, calls up to failover/2 slow) rather than measured; it covers the leases "
    "table and the shard listing, not the record path (tests/e2e and the chaos demo do)."
)


def _one(seed: int) -> str | None:
    from tests.simulation.checker import history

    logging.disable(logging.WARNING)
    _, verdict = history(seed)
    return None if verdict.ok else f"seed {seed}: {verdict}"


def run() -> list[Ratio]:
    print(__doc__)
    scale = float(os.environ.get("BENCH_SCALE", "1"))
    count = max(1, int(HISTORIES * scale))
    seeds = range(FIRST_SEED, FIRST_SEED + count)
    started = time.monotonic()
    with multiprocessing.get_context("fork").Pool(processes=max(1, min(2, os.cpu_count() or 1))) as pool:
        failures = [f for f in pool.imap_unordered(_one, seeds, chunksize=50) if f is not None]
    elapsed = time.monotonic() - started
    for failure in failures[:20]:
        print("VIOLATION", failure)
    print(f"{count} histories in {elapsed:.0f} s: {len(failures)} with a violation")
    share = len(failures) / count
    method = f"{count} seeded histories of the lease fault model (bench/lease_faults.py)"
    return [Ratio("fault_model_histories_violating", (share,), "=0", share == 0, method)]

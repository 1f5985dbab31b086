"""The load the fleet benchmarks write (bench/fleet_support.py runs it against the fleet).

:class:`Writer` writes a steady load, round-robin over keys chosen (:func:`keys_covering`) so that
every partition (every open shard) gets its share; each item carries its write number ``w`` and the
writer's wall-clock time ``t`` just before the PutItem was sent. :func:`percentile` and
:func:`spread` summarise what the benchmarks measure of it.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.fleet_records import TABLE

HASH_SPACE = 2**32


def partition_of(key: str, partitions: int, seed: int) -> int:
    """The emulator partition (open shard) a partition-key string writes to (emulator.records)."""
    from emulator.records import partition_hash

    width = HASH_SPACE // partitions
    return min(partition_hash(seed, {"S": key}) // width, partitions - 1)


def keys_covering(partitions: int, seed: int) -> list[str]:
    """One key per partition, in partition order: a round-robin over them writes to every shard."""
    chosen: dict[int, str] = {}
    n = 0
    while len(chosen) < partitions:
        key = f"item-{n:06d}"
        chosen.setdefault(partition_of(key, partitions, seed), key)
        n += 1
    return [chosen[p] for p in range(partitions)]


class Writer:
    """PutItem at up to ``rate`` per second from ``threads`` threads, round-robin over ``keys``
    (slots missed while the machine was busy are skipped, not made up in a burst).

    Every write sets ``w`` (a global write number, so each write changes the item and makes one
    stream record) and ``t`` (wall clock just before the request). ``acked`` maps (key, w) to the
    wall-clock time the PutItem returned."""

    def __init__(
        self, client_factory: Callable[[], Any], keys: list[str], rate: float, threads: int = 1
    ) -> None:
        self._client_factory = client_factory
        self._keys = keys
        self.rate = rate
        self._threads_n = threads
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self._threads: list[threading.Thread] = []
        self.acked: dict[tuple[str, int], float] = {}
        self.round_trips: list[float] = []
        self.errors = 0
        self.skipped = 0
        self._extra_client: Any = None
        self.started_at = 0.0
        self.stopped_at = 0.0

    def start(self) -> Writer:
        self.started_at = time.time()
        for i in range(self._threads_n):
            thread = threading.Thread(target=self._run, args=(i,), name=f"bench-writer-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run(self, index: int) -> None:
        client = self._client_factory()
        start = time.monotonic()
        interval = self._threads_n / self.rate
        done = 0
        while not self._stop.is_set():
            due = start + (done + index / self._threads_n) * interval
            wait = due - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)
                continue
            if -wait > interval:
                # Behind by more than a slot (the machine is busy): drop the missed slots rather than
                # burst to catch up, so the offered load stays steady; ``skipped`` says how many.
                missed = int(-wait / interval)
                done += missed
                with self._lock:
                    self.skipped += missed
                continue
            with self._lock:
                w = self._next
                self._next += 1
            self._put(client, self._keys[w % len(self._keys)], w)
            done += 1

    def _put(self, client: Any, key: str, w: int) -> None:
        sent = time.time()
        try:
            client.put_item(
                TableName=TABLE,
                Item={"pk": {"S": key}, "w": {"N": str(w)}, "t": {"N": repr(sent)}},
            )
        except Exception:
            with self._lock:
                self.errors += 1
        else:
            acked = time.time()
            with self._lock:
                self.acked[(key, w)] = acked
                self.round_trips.append(acked - sent)

    def put_now(self, keys: list[str]) -> None:
        """One write per key, now, from the calling thread (counted like the steady ones)."""
        if self._extra_client is None:
            self._extra_client = self._client_factory()
        for key in keys:
            with self._lock:
                w = self._next
                self._next += 1
            self._put(self._extra_client, key, w)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self.stopped_at = time.time()

    def achieved_rate(self) -> float:
        end = self.stopped_at or time.time()
        return len(self.acked) / max(1e-9, end - self.started_at)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def spread(values: list[float] | tuple[float, ...], fmt: str = "{:.3f}") -> str:
    if not values:
        return "n/a"
    return (
        f"min {fmt.format(min(values))} / median {fmt.format(statistics.median(values))} / "
        f"max {fmt.format(max(values))}"
    )

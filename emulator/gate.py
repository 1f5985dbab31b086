"""The gate: what each request meets before the emulator serves it.

DynamoDB Streams calls meet the account's DescribeStream rate, the per-shard GetRecords rate and
injected failures (:meth:`Gate.admit`); DynamoDB table calls meet the ``table_*`` faults — latency,
throttling, failures, writes applied but answered as failures, eventually consistent Scans answered
from an older view (:meth:`Gate.admit_table_call`). The engine owns the streams; the gate owns only
these decisions, and shares the engine's lock, seeded random draws and counters so that one seed
still gives one run.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from emulator.errors import StreamsApiError
from emulator.faults import FaultSettings, RateLimits, ScanView, ScanViews, draw_table_latency, should_fail
from ground.clock import Clock

# DynamoDB writes that table_ambiguous_rate may answer with a 500 after moto applied them.
AMBIGUOUS_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})


@dataclass(frozen=True)
class TableCall:
    """What the table faults decided for one DynamoDB request that was let through.

    Latency is split around the apply (``before_millis`` before moto sees the request,
    ``after_millis`` before the answer), so others may see a slow write before its writer hears of
    it, as on a real table.
    """

    before_millis: int = 0
    after_millis: int = 0
    refused: StreamsApiError | None = None  # throttled or failed: answered this, never applied
    ambiguous: bool = False
    ambiguous_delay_millis: int = 0
    stale_window_millis: int = 0


class Gate:
    def __init__(
        self,
        lock: threading.RLock,
        rng: random.Random,
        counters: Counter[str],
        clock: Clock,
        faults: Callable[[], FaultSettings],
    ) -> None:
        self._lock = lock
        self._rng = rng
        self._counters = counters
        self._clock = clock
        self._faults = faults
        self._limits = RateLimits()
        self._scan_views = ScanViews()

    def admit(self, operation: str, throttle_key: str | None) -> int:
        """Count the call, throttle it, maybe fail it; returns the latency (ms) to add."""
        with self._lock:
            faults = self._faults()
            self._counters[f"calls_{operation}"] += 1
            now = self._clock.monotonic_millis()
            if operation == "DescribeStream" and not self._limits.allow(
                "DescribeStream", faults.describe_stream_per_second, now
            ):
                self._counters["throttled"] += 1
                raise StreamsApiError(
                    "LimitExceededException", "Too many DescribeStream requests (limit 10/s)."
                )
            if (
                operation == "GetRecords"
                and throttle_key is not None
                and not self._limits.allow(throttle_key, faults.reads_per_shard_per_second, now)
            ):
                self._counters["throttled"] += 1
                raise StreamsApiError(
                    "LimitExceededException", f"Rate exceeded for shard {throttle_key.rpartition('|')[2]}."
                )
            if should_fail(self._rng, faults.error_rate):
                self._counters["faults_injected"] += 1
                raise StreamsApiError("InternalServerError", "Injected fault (emulator error_rate).", 500)
            return faults.latency_millis

    def admit_table_call(self, operation: str, tables: frozenset[str]) -> TableCall:
        """Decide the fate of one DynamoDB request naming ``tables`` (``table_*`` fault settings):
        its latency, and whether it is refused (throttled or failed before moto sees it), or, if it
        goes through, whether a successful write is answered as a failure (ambiguous) and whether a
        Scan may be answered from an older view. Requests outside ``table_fault_tables`` pass
        untouched."""
        with self._lock:
            faults = self._faults()
            if not faults.hits_tables(tables):
                return TableCall()
            latency = draw_table_latency(self._rng, faults)
            if latency.millis:
                self._counters["table_delayed_calls"] += 1
                self._counters["table_delay_millis"] += latency.millis
                if latency.tail:
                    self._counters["table_tail_delayed_calls"] += 1
            before, after = latency.millis // 2, latency.millis - latency.millis // 2
            if should_fail(self._rng, faults.table_throttle_rate):
                self._counters["table_throttled"] += 1
                refused = StreamsApiError(
                    "ProvisionedThroughputExceededException",
                    f"{operation}: the level of configured provisioned throughput for the table was exceeded "
                    "(emulator table_throttle_rate).",
                )
                return TableCall(before, after, refused=refused)
            if should_fail(self._rng, faults.table_error_rate):
                self._counters["table_faults_injected"] += 1
                refused = StreamsApiError(
                    "InternalServerError", f"{operation}: injected fault (emulator table_error_rate).", 500
                )
                return TableCall(before, after, refused=refused)
            ambiguous = operation in AMBIGUOUS_WRITES and should_fail(self._rng, faults.table_ambiguous_rate)
            return TableCall(
                before_millis=before,
                after_millis=after,
                ambiguous=ambiguous,
                ambiguous_delay_millis=faults.table_ambiguous_delay_millis if ambiguous else 0,
                stale_window_millis=faults.table_stale_scan_millis if operation == "Scan" else 0,
            )

    def count_ambiguous(self, delayed: bool) -> None:
        """A write was applied and is being answered HTTP 500 (``delayed``: only after a wait)."""
        with self._lock:
            self._counters["table_ambiguous_writes"] += 1
            if delayed:
                self._counters["table_ambiguous_delayed"] += 1

    def answer_scan(
        self, key: str, status: str, headers: tuple[tuple[str, str], ...], body: bytes, window_ms: int
    ) -> ScanView:
        """The answer to an eventually consistent Scan: the fresh one just computed (kept as a view
        of now) or an older view of the same request still inside the window (seeded draw). Counted
        as a stale scan only when the older answer differs from the fresh one (else nobody could
        tell)."""
        with self._lock:
            fresh = ScanView(self._clock.monotonic_millis(), status, headers, body)
            chosen = self._scan_views.record_and_pick(key, fresh, window_ms, self._rng)
            if chosen.body != fresh.body:
                self._counters["table_stale_scans"] += 1
            return chosen

    def forget_scan_views(self, table: str) -> None:
        with self._lock:
            self._scan_views.forget(f"{table}\n")

"""Throttling and injected faults for stream calls and for DynamoDB table calls.

Rates are token buckets (capacity = one second's worth, at least one call), so a client that keeps
to the advertised rate is never throttled and one that bursts above it is, as on AWS. Faults draw
from the emulator's seeded random generator, so a run with the same seed and the same call order
fails the same calls. Everything takes ``now`` in milliseconds; the caller holds the lock.

Table faults (``table_*``) model what a lease core meets on a real DynamoDB table, and each can be
confined to the tables whose names match ``table_fault_tables`` (comma-separated globs; ``*`` is
every table) so the source table can be left alone while the leases tables are hit:

* throttling and HTTP 500 answered *before* moto sees the request (nothing happened);
* latency with a long tail (:func:`draw_table_latency`): most calls near the median, a few many
  times slower, half of it before the request is applied and half after, so a slow write may
  already be visible to others before its writer hears back;
* *ambiguous* writes: applied by moto, then answered HTTP 500 (botocore retries; a conditional
  retry then fails its condition), optionally only after a delay longer than a client's read
  timeout;
* stale scans: an eventually consistent Scan may be answered from a view of the table up to
  ``table_stale_scan_millis`` old (:class:`ScanViews`).
"""

from __future__ import annotations

import fnmatch
import random
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from emulator.errors import ControlError

ALL_TABLES = "*"
# Shares of calls: must lie in [0, 1].
SHARES = (
    "error_rate",
    "table_throttle_rate",
    "table_error_rate",
    "table_latency_tail_rate",
    "table_ambiguous_rate",
)
# A tail call is table_latency_tail_millis × a Pareto(α) draw (≥ 1), capped at TAIL_CAP × the tail:
# heavy enough that the slowest calls are several times the typical tail, bounded so one call never
# stalls a test for minutes.
TAIL_ALPHA = 1.5
TAIL_CAP = 5.0
# Views of one scan kept per (table, request) at most, whatever the staleness window.
MAX_SCAN_VIEWS = 32


@dataclass(frozen=True)
class FaultSettings:
    """The live, changeable fault and throttling configuration (see EmulatorFaults)."""

    error_rate: float = 0.0
    latency_millis: int = 0
    reads_per_shard_per_second: float = 5.0
    describe_stream_per_second: float = 10.0
    consistency_delay_millis: int = 0
    child_visibility_delay_millis: int = 0
    # DynamoDB (not Streams) requests, e.g. the leases table's: answered with
    # ProvisionedThroughputExceededException / InternalServerError before moto applies them, so a
    # failed write never half-happens. Chaos runs turn them on and off.
    table_throttle_rate: float = 0.0
    table_error_rate: float = 0.0
    # Latency of every DynamoDB call in scope: near table_latency_millis (the median) for most, and
    # for a share table_latency_tail_rate of calls table_latency_tail_millis or (heavy tail) several
    # times more.
    table_latency_millis: int = 0
    table_latency_tail_millis: int = 0
    table_latency_tail_rate: float = 0.05
    # A share of successful writes (PutItem, UpdateItem, DeleteItem, TransactWriteItems,
    # BatchWriteItem) is applied and then answered HTTP 500; with a delay, the 500 comes that late
    # (set it above the client's read timeout and the client times out instead).
    table_ambiguous_rate: float = 0.0
    table_ambiguous_delay_millis: int = 0
    # An eventually consistent Scan may see the table as it was up to this long ago.
    table_stale_scan_millis: int = 0
    # Which tables the table_* faults hit: comma-separated globs over table names.
    table_fault_tables: str = ALL_TABLES
    # Kinesis data streams' own limits, per shard (AWS's): reads 2 MiB/s (a call that reads more
    # leaves the shard in debt, refusing calls until it is paid off), writes 1 000 records and
    # 1 MiB per second; ListShards 1 000 calls/s per stream. GetRecords calls per shard are
    # reads_per_shard_per_second (5, as on DynamoDB Streams).
    kinesis_read_bytes_per_second: float = 2 * 1024 * 1024
    kinesis_write_records_per_second: float = 1000.0
    kinesis_write_bytes_per_second: float = 1024 * 1024
    list_shards_per_second: float = 1000.0

    def updated(self, changes: dict[str, Any]) -> FaultSettings:
        """A copy with ``changes`` applied; unknown names and out-of-range values are refused."""
        known = set(self.__dataclass_fields__)
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ControlError(f"unknown fault setting(s) {unknown}; allowed: {sorted(known)}")
        converted: dict[str, Any] = {}
        for name, value in changes.items():
            kind = type(getattr(self, name))
            if kind is str:
                if not isinstance(value, str) or not [p for p in value.split(",") if p.strip()]:
                    raise ControlError(
                        f"fault setting {name} must be a non-empty string of globs, got {value!r}"
                    )
                converted[name] = ",".join(p.strip() for p in value.split(",") if p.strip())
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ControlError(f"fault setting {name} must be a number, got {value!r}")
            number = kind(value)
            if number < 0:
                raise ControlError(f"fault setting {name} must not be negative, got {value!r}")
            converted[name] = number
        result = replace(self, **converted)
        for share in SHARES:
            if getattr(result, share) > 1:
                raise ControlError(f"{share} is a share between 0 and 1, got {getattr(result, share)}")
        rates = (
            result.reads_per_shard_per_second,
            result.describe_stream_per_second,
            result.kinesis_read_bytes_per_second,
            result.kinesis_write_records_per_second,
            result.kinesis_write_bytes_per_second,
            result.list_shards_per_second,
        )
        if min(rates) <= 0:
            raise ControlError("rates must be above 0")
        return result

    def hits_tables(self, tables: frozenset[str]) -> bool:
        """Whether a DynamoDB request naming ``tables`` is in scope of the table faults. A request
        that names no table (ListTables) is in scope only when every table is."""
        patterns = [p.strip() for p in self.table_fault_tables.split(",") if p.strip()]
        if ALL_TABLES in patterns:
            return True
        return any(fnmatch.fnmatchcase(table, pattern) for table in tables for pattern in patterns)


class TokenBucket:
    def __init__(self, rate_per_second: float, now_ms: int) -> None:
        self.rate = rate_per_second
        self.capacity = max(1.0, rate_per_second)
        self.tokens = self.capacity
        self.updated_ms = now_ms

    def refill(self, now_ms: int) -> None:
        elapsed = max(0, now_ms - self.updated_ms) / 1000
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.updated_ms = now_ms

    def take(self, now_ms: int) -> bool:
        self.refill(now_ms)
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class RateLimits:
    """Token buckets by key: one per shard for GetRecords, one for DescribeStream, Kinesis' per-shard ones."""

    def __init__(self) -> None:
        self._buckets: dict[str, TokenBucket] = {}

    def allow(self, key: str, rate: float, now_ms: int) -> bool:
        return self.bucket(key, rate, now_ms).take(now_ms)

    def bucket(self, key: str, rate: float, now_ms: int) -> TokenBucket:
        """The bucket of ``key`` at ``rate`` (a new, full one when the rate changed), refilled to now."""
        bucket = self._buckets.get(key)
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[key] = TokenBucket(rate, now_ms)
        bucket.refill(now_ms)
        return bucket


def should_fail(rng: random.Random, error_rate: float) -> bool:
    return error_rate > 0 and rng.random() < error_rate


@dataclass(frozen=True)
class TableLatency:
    """The latency drawn for one DynamoDB call; ``tail`` when it came from the long tail."""

    millis: int
    tail: bool


def draw_table_latency(rng: random.Random, faults: FaultSettings) -> TableLatency:
    """Latency for one call: uniform in [median/2, 3·median/2] (so the median is the setting), or,
    for a share ``table_latency_tail_rate`` of calls when a tail is set, ``tail × Pareto(1.5)``
    capped at 5 × tail. Draws nothing when both are 0, so turning latency off does not shift the
    seeded sequence of the other faults."""
    median, tail = faults.table_latency_millis, faults.table_latency_tail_millis
    if median <= 0 and tail <= 0:
        return TableLatency(0, False)
    if tail > 0 and rng.random() < faults.table_latency_tail_rate:
        factor = min(rng.paretovariate(TAIL_ALPHA), TAIL_CAP)
        return TableLatency(max(median, round(tail * factor)), True)
    if median <= 0:
        return TableLatency(0, False)
    return TableLatency(round(median * rng.uniform(0.5, 1.5)), False)


@dataclass(frozen=True)
class ScanView:
    """One Scan answer as the table was at ``taken_ms`` (monotonic)."""

    taken_ms: int
    status: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass
class ScanViews:
    """Recent answers of eventually consistent Scans, per (table, request body).

    A real table's Scan reads replicas that may lag; here every fresh answer is kept for
    ``table_stale_scan_millis`` and a later identical Scan (same table, same page) is answered with
    a view drawn uniformly from those still inside the window, the fresh one included. Keying by the
    whole request keeps filters, projections and paging right without re-evaluating anything: a
    stale answer is exactly what the table answered then.
    """

    views: dict[str, deque[ScanView]] = field(default_factory=dict)

    def record_and_pick(self, key: str, fresh: ScanView, window_ms: int, rng: random.Random) -> ScanView:
        for other in [
            k for k, views in self.views.items() if fresh.taken_ms - views[-1].taken_ms > window_ms
        ]:
            del self.views[other]  # requests nobody repeated within the window: nothing to serve
        kept = self.views.setdefault(key, deque(maxlen=MAX_SCAN_VIEWS))
        while kept and fresh.taken_ms - kept[0].taken_ms > window_ms:
            kept.popleft()
        kept.append(fresh)
        if len(kept) == 1:
            return fresh
        return kept[rng.randrange(len(kept))]

    def forget(self, key_prefix: str) -> None:
        """Drop every view of one table (it was deleted or recreated)."""
        for key in [k for k in self.views if k.startswith(key_prefix)]:
            del self.views[key]

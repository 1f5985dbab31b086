"""Throttling and injected faults for stream calls.

Rates are token buckets (capacity = one second's worth, at least one call), so a client that keeps
to the advertised rate is never throttled and one that bursts above it is, as on AWS. Faults draw
from the emulator's seeded random generator, so a run with the same seed and the same call order
fails the same calls. Everything takes ``now`` in milliseconds; the caller holds the lock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from emulator.errors import ControlError


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
    # failed write never half-happens. Live-only (control API); chaos runs turn them on and off.
    table_throttle_rate: float = 0.0
    table_error_rate: float = 0.0

    def updated(self, changes: dict[str, Any]) -> FaultSettings:
        """A copy with ``changes`` applied; unknown names and out-of-range values are refused."""
        known = set(self.__dataclass_fields__)
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ControlError(f"unknown fault setting(s) {unknown}; allowed: {sorted(known)}")
        converted: dict[str, Any] = {}
        for name, value in changes.items():
            kind = type(getattr(self, name))
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ControlError(f"fault setting {name} must be a number, got {value!r}")
            number = kind(value)
            if number < 0:
                raise ControlError(f"fault setting {name} must not be negative, got {value!r}")
            converted[name] = number
        result = replace(self, **converted)
        for share in ("error_rate", "table_throttle_rate", "table_error_rate"):
            if getattr(result, share) > 1:
                raise ControlError(f"{share} is a share between 0 and 1, got {getattr(result, share)}")
        if result.reads_per_shard_per_second <= 0 or result.describe_stream_per_second <= 0:
            raise ControlError("rates must be above 0")
        return result


class TokenBucket:
    def __init__(self, rate_per_second: float, now_ms: int) -> None:
        self.rate = rate_per_second
        self.capacity = max(1.0, rate_per_second)
        self.tokens = self.capacity
        self.updated_ms = now_ms

    def take(self, now_ms: int) -> bool:
        elapsed = max(0, now_ms - self.updated_ms) / 1000
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.updated_ms = now_ms
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class RateLimits:
    """One bucket per shard for GetRecords, one for DescribeStream."""

    def __init__(self) -> None:
        self._buckets: dict[str, TokenBucket] = {}

    def allow(self, key: str, rate: float, now_ms: int) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[key] = TokenBucket(rate, now_ms)
        return bucket.take(now_ms)


def should_fail(rng: random.Random, error_rate: float) -> bool:
    return error_rate > 0 and rng.random() < error_rate

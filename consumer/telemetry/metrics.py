"""The metrics interface every part of the worker records through.

Names follow the Java KCL's (``RenewLease.Success``/``.Time``, ``RecordsProcessed``, ...) so existing
dashboards and habits carry over; ``operation`` is KCL's Operation dimension.
"""

from __future__ import annotations

from typing import Protocol


class Metrics(Protocol):
    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        """Add to a counter for the current period."""
        ...

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        """Record a level (the period keeps max, min, sum and count)."""
        ...

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        """``<prefix>.Time`` in milliseconds and ``<prefix>.Success`` as 0 or 1."""
        ...


class NullMetrics:
    """Records nothing: for tests and for ``metrics.level: NONE``."""

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        return None

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        return None

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        return None

"""The metrics port: what the other packages call to record a figure.

:class:`consumer.telemetry.metrics.MetricsRecorder` and ``NullMetrics`` provide it. It lives in a
module of its own because ``metrics`` imports ``health`` (transport trouble), so neither can hold it
for the other.
"""

from __future__ import annotations

from typing import Protocol

from consumer.telemetry.metric_names import Aggregation


class Metrics(Protocol):
    """What the other packages call; MetricsRecorder and NullMetrics provide it."""

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None: ...

    def gauge(
        self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None
    ) -> None: ...

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None: ...


class MetricsMirror(Protocol):
    """A second backend beside EMF (:class:`consumer.telemetry.otel.OtelMirror`): hears every figure
    the recorder keeps (after the metrics level), exports when the recorder flushes."""

    def record(
        self,
        operation: str,
        name: str,
        value: float,
        unit: str,
        *,
        shard_id: str | None,
        aggregation: Aggregation,
    ) -> None: ...

    def export(self) -> None: ...

    def shutdown(self) -> None: ...

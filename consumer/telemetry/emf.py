"""CloudWatch embedded metric format (EMF) documents, serialized by aws-embedded-metrics.

We use the library's ``MetricsContext`` and ``LogSerializer`` (synchronous, pure) but not its
``MetricsLogger``: the logger is built around asyncio and a process-global environment, and flushes
one event per scope, which fights a threaded worker that aggregates many shards and flushes on a
timer. The serializer still gives us the documented format, its limits (100 metrics and 100 values
per metric per document, split automatically) and its validation of names and units.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_embedded_metrics.exceptions import (
    DimensionSetExceededError,
    InvalidDimensionError,
    InvalidMetricError,
)
from aws_embedded_metrics.logger.metrics_context import MetricsContext
from aws_embedded_metrics.serializers.log_serializer import LogSerializer

from consumer.telemetry.errors import MetricsError


@dataclass(frozen=True)
class MetricValues:
    name: str
    unit: str
    values: tuple[float, ...]


def build_documents(
    namespace: str,
    dimension_sets: Sequence[Mapping[str, str]],
    metrics: Sequence[MetricValues],
    timestamp_millis: int,
    properties: Mapping[str, object] | None = None,
) -> list[str]:
    """One or more EMF JSON documents (the serializer splits at its per-document limits)."""
    if not metrics:
        return []
    context = MetricsContext(namespace=namespace, properties=dict(properties or {}))
    try:
        context.set_dimensions([dict(d) for d in dimension_sets], use_default=False)
        for metric in metrics:
            for value in metric.values:
                context.put_metric(metric.name, value, metric.unit)
    except (InvalidMetricError, InvalidDimensionError, DimensionSetExceededError) as exc:
        raise MetricsError(f"CloudWatch would reject this metric: {exc}") from exc
    # The period's end, from the recorder's clock (set_timestamp would check it against real time).
    context.meta["Timestamp"] = int(timestamp_millis)
    return LogSerializer.serialize(context)

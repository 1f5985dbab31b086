"""The worker's metrics from outside: the catalogue every metric is named in (unit, aggregation; the
dashboard draws from it, the demo's load generator publishes under ``LOAD_GENERATOR_OPERATION``)
and the recorder with its transports, for a process that publishes as a worker does."""

from consumer.telemetry.metric_names import LOAD_GENERATOR_OPERATION, Aggregation, spec_for
from consumer.telemetry.metrics import Metrics, MetricsRecorder, NullMetrics
from consumer.telemetry.transports import NullTransport, transport_from_settings

__all__ = [
    "LOAD_GENERATOR_OPERATION",
    "Aggregation",
    "Metrics",
    "MetricsRecorder",
    "NullMetrics",
    "NullTransport",
    "spec_for",
    "transport_from_settings",
]

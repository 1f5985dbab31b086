"""The telemetry package's one exception hierarchy.

Telemetry must never take a worker down, so most transport failures are absorbed (a WARN and a
counter). These exceptions are for the cases a person has to fix: a metric with a bad name or unit,
a transport that cannot be configured.
"""

from __future__ import annotations


class TelemetryError(Exception):
    """Base of every error raised by ``consumer.telemetry``."""


class MetricsError(TelemetryError, ValueError):
    """A metric call with input CloudWatch would reject (name, unit, value)."""


class TransportError(TelemetryError):
    """A metrics transport could not deliver; the shipper turns this into a WARN and a counter."""

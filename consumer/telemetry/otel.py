"""The worker's metrics as OpenTelemetry metrics, exported over OTLP/HTTP (``metrics.backend: otel |
both``), beside or instead of the CloudWatch EMF documents.

:class:`OtelMirror` receives every figure :class:`~consumer.telemetry.metrics.MetricsRecorder`
records (after the metrics level has filtered it) and records it into the OpenTelemetry SDK. The
recorder's own flush timer (a loop made by ``ground.threads``, like every loop of the worker) exports
the period every ``metrics.flush_interval_seconds`` to ``metrics.otlp_endpoint``: the SDK's reader is
built without a thread of its own. The names follow KCL 3.5's OpenTelemetry backend as issue 49
describes it, so a dashboard built for a Java KCL fleet reads this one:

* meter ``software.amazon.kinesis``; each name prefixed ``aws.kinesis.client.`` in snake case
  (``RecordsProcessed`` -> ``aws.kinesis.client.records_processed``), ``.Time`` -> ``.duration``,
  ``.Count`` dropped, and ``MillisBehindLatest`` -> ``aws.kinesis.client.consumer.lag.duration``;
  a figure in milliseconds is a ``.duration`` in seconds (OpenTelemetry's unit of time);
* counts (``count``) are counters; a level in ``Count`` (leases held, workers, lanes, parked keys)
  a gauge; every other figure (times, lags, bytes, CPU) a histogram, with buckets in seconds from
  5 ms to a day for the times;
* attributes ``aws.kinesis.operation`` (the EMF ``Operation``), ``aws.kinesis.stream_name`` (the
  table whose stream it is), ``aws.kinesis.consumer.name`` (``application_name``) and, where the EMF
  document would carry ``ShardId`` (``metrics.shard_id_dimension``, or a metric always named per
  shard), ``aws.kinesis.shard.id``. The worker is the resource's ``service.instance.id`` (the EMF
  ``WorkerIdentifier``), the application its ``service.name``: a backend sums or maxes over
  workers for the fleet-wide figure, as CloudWatch does over the ``[Operation]`` set.

Where OpenTelemetry's messaging conventions define a metric, it is recorded too (meter
``dynamodb-stream-fleet``): ``messaging.client.consumed.messages`` (records delivered to the
processor) and ``messaging.process.duration`` (one processor call), with ``messaging.system``,
``messaging.destination.name`` (the table), ``messaging.consumer.group.name`` and, with the shard
detail, ``messaging.destination.partition.id``.

The SDK is imported only when the backend asks for it: a worker on ``emf`` does not load it.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable
from typing import Any

from consumer.lease_keys import table_of
from consumer.telemetry.health import TransportHealth
from consumer.telemetry.metric_names import Aggregation, spec_for
from ground.settings import ConfigError, Problem, Settings

log = logging.getLogger("consumer.telemetry.otel")

KCL_METER = "software.amazon.kinesis"
MESSAGING_METER = "dynamodb-stream-fleet"
PREFIX = "aws.kinesis.client."
MESSAGING_SYSTEM = "aws_dynamodb_streams"
TRANSPORT = "otlp"
EXPORT_TIMEOUT_SECONDS = 5.0
# Bucket bounds of every histogram in seconds: a handler call of a few ms up to the stream's 24 h
# retention (a lag that large is the one an operator must see).
SECONDS_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    21600.0, 86400.0,
)  # fmt: skip
_RENAMED = {"MillisBehindLatest": "consumer.lag.duration"}
_UNITS = {"Milliseconds": "s", "Bytes": "By", "Count": "{count}", "Percent": "%", "Megabytes": "MBy"}
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake(text: str) -> str:
    return _WORD.sub("_", text).lower()


def otel_name(name: str, unit: str) -> str:
    """KCL 3.5's OpenTelemetry name of a metric (module docstring)."""
    if name in _RENAMED:
        return PREFIX + _RENAMED[name]
    parts = name.split(".")
    if parts[-1] == "Time":
        parts[-1] = "duration"
    elif parts[-1] == "Count" and len(parts) > 1:
        parts.pop()
    words = [snake(part) for part in parts]
    if unit == "Milliseconds" and words[-1] != "duration":
        words.append("duration")
    return PREFIX + ".".join(words)


def kind_of(aggregation: Aggregation, unit: str) -> str:
    """counter, gauge or histogram (module docstring)."""
    if aggregation is Aggregation.SUM:
        return "counter"
    if aggregation in (Aggregation.LAST, Aggregation.MAX) and unit == "Count":
        return "gauge"
    return "histogram"


class OtelMirror:
    """Records the worker's figures into the OpenTelemetry SDK (thread-safe; module docstring).

    ``reader``: the SDK reader to collect with (tests pass an in-memory one); by default one that
    exports over OTLP/HTTP when :meth:`export` is called, and never on a thread of its own."""

    def __init__(
        self,
        settings: Settings,
        worker_id: str,
        *,
        health: TransportHealth | None = None,
        reader: Any | None = None,
    ) -> None:
        try:
            from opentelemetry.sdk.metrics import Histogram, MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
            from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
            from opentelemetry.sdk.resources import Resource
        except ImportError as exc:
            problem = Problem(
                f"config/{settings.env}.yaml",
                "metrics.backend",
                f"{settings.metrics.backend} needs the OpenTelemetry SDK and its OTLP exporter "
                "(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http, pinned in requirements.txt), "
                f"which do not import here ({exc}); install them or set metrics.backend: emf",
            )
            raise ConfigError([problem]) from exc

        self._application = settings.application_name
        self._table = settings.table.name
        self._several = settings.several_streams
        self._shard_detail = settings.metrics.shard_id_dimension
        self._health = health
        if reader is None:
            # math.inf: the reader starts no thread; the recorder's flush timer calls export().
            reader = PeriodicExportingMetricReader(
                _counting_exporter(settings.metrics.otlp_endpoint, self._failed),
                export_interval_millis=math.inf,
                export_timeout_millis=EXPORT_TIMEOUT_SECONDS * 1000,
            )
        self._reader = reader
        resource = Resource.create({"service.name": self._application, "service.instance.id": worker_id})
        seconds = View(
            instrument_type=Histogram,
            instrument_unit="s",
            aggregation=ExplicitBucketHistogramAggregation(SECONDS_BUCKETS),
        )
        self._provider = MeterProvider(
            resource=resource, metric_readers=[reader], views=[seconds], shutdown_on_exit=False
        )
        self._kcl = self._provider.get_meter(KCL_METER)
        messaging = self._provider.get_meter(MESSAGING_METER)
        self._consumed = messaging.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Records delivered to the processor.",
        )
        self._process = messaging.create_histogram(
            "messaging.process.duration", unit="s", description="One call of the processor."
        )
        self._instruments: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _failed(self, error: str) -> None:
        if self._health is not None:
            self._health.send_failed(TRANSPORT, error)

    def record(
        self,
        operation: str,
        name: str,
        value: float,
        unit: str,
        *,
        shard_id: str | None,
        aggregation: Aggregation,
    ) -> None:
        """One figure, as MetricsRecorder recorded it."""
        spec = spec_for(name)
        stream = table_of(shard_id) if self._several and shard_id is not None else None
        named = spec is not None and spec.named_shard
        detail = shard_id if shard_id is not None and (self._shard_detail or named) else None
        attributes: dict[str, str] = {
            "aws.kinesis.operation": operation,
            "aws.kinesis.consumer.name": self._application,
        }
        if stream is not None or not self._several:
            attributes["aws.kinesis.stream_name"] = stream or self._table
        if detail is not None:
            attributes["aws.kinesis.shard.id"] = detail
        kind = kind_of(aggregation, unit)
        instrument = self._instrument(name, unit, kind)
        amount = value / 1000 if unit == "Milliseconds" else value
        if kind == "counter":
            instrument.add(amount, attributes)
        elif kind == "gauge":
            instrument.set(amount, attributes)
        else:
            instrument.record(amount, attributes)
        if name == "RecordsProcessed":
            self._consumed.add(value, self._messaging(stream, detail))
        elif name == "RecordProcessor.processRecords.Time":
            self._process.record(value / 1000, self._messaging(None, None))

    def _messaging(self, stream: str | None, shard_id: str | None) -> dict[str, str]:
        attributes = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.consumer.group.name": self._application,
        }
        if stream is not None or not self._several:
            attributes["messaging.destination.name"] = stream or self._table
        if shard_id is not None:
            attributes["messaging.destination.partition.id"] = shard_id
        return attributes

    def _instrument(self, name: str, unit: str, kind: str) -> Any:
        key = otel_name(name, unit)
        with self._lock:
            found = self._instruments.get(key)
            if found is None:
                spec = spec_for(name)
                description = spec.description if spec is not None else ""
                create: Callable[..., Any] = {
                    "counter": self._kcl.create_counter,
                    "gauge": self._kcl.create_gauge,
                    "histogram": self._kcl.create_histogram,
                }[kind]
                found = self._instruments[key] = create(
                    key, unit=_UNITS.get(unit, unit), description=description
                )
            return found

    def export(self) -> None:
        """Collect the period and export it (the recorder's flush, on its timer's thread). A failure is
        counted by the exporter, never raised: the worker's metrics must not stop its work."""
        try:
            self._reader.collect(timeout_millis=EXPORT_TIMEOUT_SECONDS * 1000)
        except Exception as exc:  # a timeout of the SDK's collection: the next period tries again
            self._failed(f"{type(exc).__name__}: {exc}")

    def shutdown(self) -> None:
        """Stop the SDK (the last period was exported by the recorder's last flush)."""
        self._provider.shutdown(timeout_millis=EXPORT_TIMEOUT_SECONDS * 1000)


def _counting_exporter(endpoint: str, failed: Callable[[str], None]) -> Any:
    """The OTLP/HTTP exporter, with each failed export counted as a telemetry send failure (the
    worker's ``TelemetrySendFailures`` and a rate-limited WARNING), not only the SDK's own log line."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import MetricExportResult

    class CountingExporter(OTLPMetricExporter):
        def export(self, metrics_data: Any, timeout_millis: float | None = 10_000, **kwargs: Any) -> Any:
            try:
                result = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:  # the flush timer must survive it
                failed(f"{type(exc).__name__}: {exc}")
                return MetricExportResult.FAILURE
            if result is not MetricExportResult.SUCCESS:
                failed(f"the collector at {endpoint} refused the export or did not answer")
            return result

    return CountingExporter(endpoint=f"{endpoint}/v1/metrics", timeout=EXPORT_TIMEOUT_SECONDS)

"""The worker's metrics: aggregated in memory, flushed as EMF documents on a timer.

Recording a metric is a dictionary update under one lock: no I/O and no event per record, so the
hot path (one ``count`` per delivered batch) costs microseconds. Every ``flush_interval_seconds``
the aggregates of the period become EMF documents, handed to a :class:`BackgroundShipper` that
talks to the transport on its own thread.

Dimensions: ``Operation`` and ``WorkerIdentifier`` always. With ``metrics.shard_id_dimension`` and
a ``shard_id`` given, the document carries two dimension sets, ``[Operation, WorkerIdentifier,
ShardId]`` and ``[Operation, WorkerIdentifier]``, so the per-shard series exists *and* the
aggregated series that dashboards and alarms use stays complete. Without it, shards are aggregated
into one series per operation. A metric the catalogue marks ``fleet`` goes in a document of its own
that also carries ``[Operation]``: one series the whole fleet adds to (metric_names.py); one marked
``named_shard`` carries ``[Operation, ShardId]`` whatever the setting says (a stalled shard, named).

With several streams (``streams:``) a figure recorded for a shard (its lease key namespaced by its
stream, consumer/streams/namespace.py) also carries ``Stream`` (the table's name): one more set,
``[Operation, WorkerIdentifier, Stream]`` (and ``[Operation, Stream]`` for a fleet metric), so the
dashboard's and the alarms' rows per stream read it; the sets without it still add up every stream.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from aws_embedded_metrics.unit import Unit

from consumer.lease_keys import table_of
from consumer.telemetry.emf import MetricValues, build_documents
from consumer.telemetry.errors import MetricsError
from consumer.telemetry.health import TransportHealth
from consumer.telemetry.metric_names import Aggregation, Level, spec_for
from consumer.telemetry.process import ProcessSampler
from consumer.telemetry.recorder import Metrics as Metrics  # noqa: PLC0414 (the port, re-exported for callers)
from consumer.telemetry.shipper import BackgroundShipper
from consumer.telemetry.transports import MetricsTransport
from ground.clock import Clock, SystemClock
from ground.settings import Settings
from ground.threads import SYSTEM_THREADS, Running, Threads

log = logging.getLogger("consumer.telemetry.metrics")

TELEMETRY_OPERATION = "Telemetry"
MAX_NAME_LENGTH = 1024


class NullMetrics:
    """Records nothing: for components built without telemetry (unit tests, one-shot commands)."""

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        del operation, name, value, unit, shard_id

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        del operation, name, value, unit, shard_id

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        del operation, name_prefix, millis, success


@dataclass
class _Series:
    unit: str
    aggregation: Aggregation
    total: float = 0.0
    last: float = 0.0
    maximum: float = -math.inf
    samples: list[float] = field(default_factory=list)
    capped: int = 0

    def add(self, value: float, max_samples: int) -> None:
        self.total += value
        self.last = value
        self.maximum = max(self.maximum, value)
        if self.aggregation is Aggregation.SAMPLES:
            if len(self.samples) < max_samples:
                self.samples.append(value)
            else:
                self.capped += 1

    def values(self) -> tuple[float, ...]:
        if self.aggregation is Aggregation.SUM:
            return (self.total,)
        if self.aggregation is Aggregation.MAX:
            return (self.maximum,)
        if self.aggregation is Aggregation.LAST:
            return (self.last,)
        return tuple(self.samples)


# (operation, shard id or None when aggregated, stream or None when there is only one)
_GroupKey = tuple[str, str | None, str | None]
FlushHook = Callable[["MetricsRecorder"], None]


class MetricsRecorder:
    """Thread-safe metrics aggregator for one worker; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        worker_id: str,
        transport: MetricsTransport,
        clock: Clock | None = None,
        *,
        health: TransportHealth | None = None,
        max_queued_documents: int = 10_000,
        max_samples_per_period: int = 1_000,
        sample_process: bool = True,
        retry_millis: int = 1_000,
        threads: Threads = SYSTEM_THREADS,
    ) -> None:
        self._namespace = settings.metrics_namespace
        self._level = Level[settings.metrics.level]
        self._shard_dimension = settings.metrics.shard_id_dimension
        self._stream_dimension = settings.several_streams
        self._interval_seconds = settings.metrics.flush_interval_seconds
        self._worker_id = worker_id
        self._clock = clock or SystemClock()
        self.health = health or TransportHealth(self._clock)
        self._shipper = BackgroundShipper(
            transport,
            self.health,
            max_queued=max_queued_documents,
            retry_millis=retry_millis,
            threads=threads,
        )
        self._threads = threads
        self._max_samples = max_samples_per_period
        self._lock = threading.Lock()
        self._groups: dict[_GroupKey, dict[str, _Series]] = {}
        self._hooks: list[FlushHook] = []
        if sample_process:
            self._hooks.append(ProcessSampler(self._clock).record)
        self._stop = threads.event()
        self._timer: Running | None = None

    # ------------------------------------------------------------------------------ recording

    @property
    def worker_id(self) -> str:
        return self._worker_id

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        """Add ``value`` to a counter; the period's sum is published."""
        self._record(operation, name, value, unit, shard_id=shard_id, aggregation=Aggregation.SUM)

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        """Set a level: the period's last value, or its maximum where the catalogue says so."""
        spec = spec_for(name)
        aggregation = (
            spec.aggregation if spec is not None and spec.aggregation is not Aggregation.SUM else None
        )
        self._record(
            operation, name, value, unit, shard_id=shard_id, aggregation=aggregation or Aggregation.LAST
        )

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        """KCL's timed-operation pair: ``<prefix>.Time`` (ms, every sample) and ``<prefix>.Success`` (0/1)."""
        samples = Aggregation.SAMPLES
        self._record(
            operation, f"{name_prefix}.Time", millis, "Milliseconds", shard_id=None, aggregation=samples
        )
        ok = 1 if success else 0
        self._record(operation, f"{name_prefix}.Success", ok, "Count", shard_id=None, aggregation=samples)

    @contextmanager
    def timed(self, operation: str, name_prefix: str) -> Iterator[None]:
        """Time the block; an exception counts as ``Success = 0`` and propagates unchanged."""
        started = self._clock.monotonic_millis()
        success = False
        try:
            yield
            success = True
        finally:
            self.timing(operation, name_prefix, self._clock.monotonic_millis() - started, success)

    def add_flush_hook(self, hook: FlushHook) -> None:
        """``hook(recorder)`` runs just before each flush (for sampled gauges such as CPU)."""
        with self._lock:
            self._hooks.append(hook)

    def _record(
        self,
        operation: str,
        name: str,
        value: float,
        unit: str,
        *,
        shard_id: str | None,
        aggregation: Aggregation,
    ) -> None:
        if self._level is Level.NONE:
            return
        spec = spec_for(name)
        level = spec.level if spec is not None else Level.DETAILED
        if level.value > self._level.value:
            return
        _validate(operation, name, value, unit, spec.unit if spec is not None else None)
        stream = table_of(shard_id) if self._stream_dimension and shard_id is not None else None
        named = spec is not None and spec.named_shard
        key = (operation, shard_id if self._shard_dimension or named else None, stream)
        with self._lock:
            group = self._groups.setdefault(key, {})
            series = group.get(name)
            if series is None:
                series = group[name] = _Series(unit, aggregation)
            elif series.unit != unit:
                raise MetricsError(
                    f"metric {name} of operation {operation} was recorded in {series.unit} and now in {unit}"
                )
            series.add(float(value), self._max_samples)

    # ------------------------------------------------------------------------------ flushing

    def flush(self) -> int:
        """Turn the period's aggregates into EMF documents and queue them; returns how many."""
        if self._level is Level.NONE:
            return 0
        for hook in list(self._hooks):
            try:
                hook(self)
            except Exception as exc:  # a sampler must not stop the flush
                log.warning("metrics flush hook %r failed: %s", hook, exc)
        increments = self.health.take_increments()
        if increments.dropped:
            self.count(TELEMETRY_OPERATION, "TelemetryDropped", increments.dropped)
        if increments.send_failures:
            self.count(TELEMETRY_OPERATION, "TelemetrySendFailures", increments.send_failures)
        with self._lock:
            groups, self._groups = self._groups, {}
        timestamp = self._clock.wall_millis()
        documents: list[str] = []
        for (operation, shard_id, stream), series_by_name in sorted(
            groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2] or "")
        ):
            documents.extend(self._documents_for(operation, shard_id, stream, series_by_name, timestamp))
        self._shipper.submit(documents)
        return len(documents)

    def _documents_for(
        self,
        operation: str,
        shard_id: str | None,
        stream: str | None,
        series_by_name: dict[str, _Series],
        timestamp: int,
    ) -> list[str]:
        base = {"Operation": operation, "WorkerIdentifier": self._worker_id}
        dimension_sets = [base] if shard_id is None else [{**base, "ShardId": shard_id}, base]
        if stream is not None:
            dimension_sets.insert(-1, {**base, "Stream": stream})
        metrics: list[MetricValues] = []
        fleet: list[MetricValues] = []
        named: list[MetricValues] = []
        for name, series in sorted(series_by_name.items()):
            if series.values():
                spec = spec_for(name)
                if spec is not None and spec.named_shard and shard_id is not None:
                    target = named
                else:
                    target = fleet if spec is not None and spec.fleet else metrics
                target.append(MetricValues(name, series.unit, series.values()))
        if not self._shard_dimension and shard_id is not None:
            dimension_sets = [base]  # the key carries the shard only for named_shard metrics
        capped = sum(series.capped for series in series_by_name.values())
        if capped:
            metrics.append(MetricValues("MetricSamplesCapped", "Count", (float(capped),)))
        documents = build_documents(self._namespace, dimension_sets, metrics, timestamp)
        if fleet:
            fleet_sets = [*dimension_sets, {"Operation": operation}]
            if stream is not None:
                fleet_sets.append({"Operation": operation, "Stream": stream})
            documents += build_documents(self._namespace, fleet_sets, fleet, timestamp)
        if named and shard_id is not None:
            named_sets = [{"Operation": operation, "ShardId": shard_id}, {"Operation": operation}, base]
            documents += build_documents(self._namespace, named_sets, named, timestamp)
        return documents

    def wait_sent(self, timeout_seconds: float) -> bool:
        """Wait until the queued documents were delivered (tests, one-shot commands)."""
        return self._shipper.wait_idle(timeout_seconds)

    # ------------------------------------------------------------------------------ timer

    def start(self) -> None:
        """Start shipping and the flush timer (every ``metrics.flush_interval_seconds``)."""
        if self._level is Level.NONE or self._timer is not None:
            return
        self._shipper.start()
        self._timer = self._threads.start("metrics-flush", self._tick)

    def _tick(self) -> None:
        while not self._stop.wait(self._interval_seconds):
            try:
                self.flush()
            except Exception as exc:  # the timer must survive anything a flush meets
                log.warning("metrics flush failed: %s", exc)

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Stop the timer, flush the last period and ship it (at most ``timeout_seconds``)."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout_seconds)
        try:
            self.flush()
        finally:
            self._shipper.close(timeout_seconds)


_VALID_UNITS = {unit.value for unit in Unit}


def _validate(operation: str, name: str, value: float, unit: str, catalogue_unit: str | None) -> None:
    if not operation or not name or len(name) > MAX_NAME_LENGTH:
        raise MetricsError(
            f"metric name and operation must be 1-{MAX_NAME_LENGTH} characters: {operation!r}/{name!r}"
        )
    if unit not in _VALID_UNITS:
        raise MetricsError(
            f"metric {name}: unit {unit!r} is not a CloudWatch unit ({', '.join(sorted(_VALID_UNITS))})"
        )
    if catalogue_unit is not None and unit != catalogue_unit:
        raise MetricsError(
            f"metric {name} is published in {catalogue_unit}, not {unit} (see metric_names.py)"
        )
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MetricsError(f"metric {name}: value must be a finite number, got {value!r}")

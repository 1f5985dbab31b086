"""A worker's metrics as CloudWatch receives them: aggregated per flush period as
``consumer.telemetry.metrics.MetricsRecorder`` aggregates them, then put as datapoints.

The real recorder ships EMF documents through a background thread to the instance's agent; in the
simulator a worker's :class:`PeriodMetrics` keeps the same aggregates (per operation and name:
counts summed, gauges their last value or, where the catalogue says, their maximum) and
:meth:`flush` hands them over with the dimensions the recorder's documents carry (``Operation``
and ``WorkerIdentifier``, plus ``Operation`` alone for a metric the catalogue marks ``fleet``, and
``Operation`` with ``ShardId`` for one it marks ``named_shard``). Per-shard series of
``metrics.shard_id_dimension`` feed no alarm and are not kept.
Timings (``.Time`` / ``.Success`` samples) feed no alarm and are not kept.
tests/simulation/test_ops_stand_ins.py holds the aggregates to the real recorder's documents.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from consumer.telemetry.metric_names import Aggregation, spec_for

Key = tuple[str, str, str]  # operation, metric, the shard a shard-named metric names ("" otherwise)


def _named(name: str) -> bool:
    return bool(getattr(spec_for(name), "named_shard", False))


@dataclass
class PeriodMetrics:
    worker_id: str
    _values: dict[Key, tuple[Aggregation, float]] = field(default_factory=dict)

    @staticmethod
    def _key(operation: str, name: str, shard_id: str | None) -> Key:
        return (operation, name, (shard_id or "") if _named(name) else "")

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        key = self._key(operation, name, shard_id)
        _, before = self._values.get(key, (Aggregation.SUM, 0.0))
        self._values[key] = (Aggregation.SUM, before + float(value))

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        spec = spec_for(name)
        how = (
            spec.aggregation
            if spec is not None and spec.aggregation is not Aggregation.SUM
            else Aggregation.LAST
        )
        key = self._key(operation, name, shard_id)
        if how is Aggregation.MAX and key in self._values:
            value = max(value, self._values[key][1])
        self._values[key] = (how, float(value))

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        return None

    def flush(self) -> Iterator[tuple[dict[str, str], str, float]]:
        """(dimensions, metric, value) of the period just ended, one per series it goes to: a
        shard-named metric (the catalogue's ``named_shard``) also under [Operation, ShardId]."""
        values, self._values = self._values, {}
        for (operation, name, shard), (_, value) in sorted(values.items()):
            yield {"Operation": operation, "WorkerIdentifier": self.worker_id}, name, value
            spec = spec_for(name)
            if spec is not None and spec.fleet:
                yield {"Operation": operation}, name, value
            if shard:
                yield {"Operation": operation, "ShardId": shard}, name, value

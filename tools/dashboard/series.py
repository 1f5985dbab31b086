"""Time series of EMF documents on the dashboard's clock: buckets, statistics, rates, folds.

Time: the x axis counts seconds from ``start_millis`` (``consumer demo`` passes its own t+0, so the
dashboard and the demo's events share one clock; without it, t = 0 is the start of the first
document's period). A document stamped T aggregates its publisher's flush period (T - bucket, T],
so it is counted in the bucket that holds the middle of that period; a point at x stands for the
bucket [x, x + bucket). A metric's statistic is applied per bucket over every document of that
bucket, so a metric published by several workers or shards adds up the way CloudWatch adds it;
a metric whose fleet line folds otherwise (``Metric.across``: the sum of each worker's maximum) is
folded per worker first, as CloudWatch's ``SUM(SEARCH(...))`` does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from consumer.api.metrics import LOAD_GENERATOR_OPERATION
from tools.dashboard.readback import MetricPoint
from tools.dashboard.widget_model import Formula, Metric, Statistic

Series = dict[float, float]  # bucket start, seconds since the axis' start -> value


@dataclass(frozen=True)
class TimeAxis:
    """Buckets of ``bucket_seconds`` counted from ``start_millis`` (t = 0)."""

    start_millis: int
    bucket_seconds: float

    def bucket_of(self, timestamp_millis: int) -> float:
        """The bucket of a document stamped ``timestamp_millis`` (the middle of its period)."""
        middle = (timestamp_millis - self.start_millis) / 1000 - self.bucket_seconds / 2
        return math.floor(middle / self.bucket_seconds) * self.bucket_seconds

    def span(self, points: Iterable[MetricPoint]) -> list[float]:
        """Every bucket from the first document's to the last one's, empty ones included."""
        buckets = {self.bucket_of(p.timestamp_millis) for p in points}
        if not buckets:
            return []
        first = round(min(buckets) / self.bucket_seconds)
        last = round(max(buckets) / self.bucket_seconds)
        return [k * self.bucket_seconds for k in range(first, last + 1)]


def time_axis(
    points: Sequence[MetricPoint], bucket_seconds: float, start_millis: int | None = None
) -> TimeAxis:
    """The axis for ``points``: from ``start_millis``, else from the first document's period start."""
    if start_millis is None:
        first = min((p.timestamp_millis for p in points), default=0)
        start_millis = first - round(bucket_seconds * 1000)
    return TimeAxis(start_millis, bucket_seconds)


def _apply(statistic: Statistic, values: list[float]) -> float:
    if statistic == "Sum":
        return sum(values)
    if statistic == "Maximum":
        return max(values)
    if statistic == "Minimum":
        return min(values)
    return sum(values) / len(values)


def series_for(
    points: Sequence[MetricPoint],
    name: str,
    statistic: Statistic,
    bucket_seconds: float,
    worker: str | None = None,
    *,
    start_millis: int | None = None,
    operation: str | None = None,
) -> Series:
    """One metric's time series: the statistic over each bucket (optionally for one worker, and
    only documents of ``operation`` when given).

    Only buckets that got a document appear; :func:`per_second` and :func:`with_gaps` decide what
    the missing ones mean.
    """
    if not points:
        return {}
    axis = time_axis(points, bucket_seconds, start_millis)
    buckets: dict[float, list[float]] = defaultdict(list)
    for point in points:
        if point.name != name or (worker is not None and point.worker != worker):
            continue
        if operation is not None and point.operation != operation:
            continue
        buckets[axis.bucket_of(point.timestamp_millis)].extend(point.values)
    return {t: _apply(statistic, values) for t, values in sorted(buckets.items())}


def per_second(sums: Series, bucket_seconds: float, buckets: Sequence[float]) -> Series:
    """A counter's sums per bucket as a rate per second over ``buckets``; zero where none came."""
    return {t: sums.get(t, 0.0) / bucket_seconds for t in buckets}


def with_gaps(series: Series, bucket_seconds: float) -> Series:
    """A gauge over its own first..last bucket, NaN where a bucket got nothing (the line breaks)."""
    if not series:
        return {}
    first = round(min(series) / bucket_seconds)
    last = round(max(series) / bucket_seconds)
    filled: Series = {}
    for k in range(first, last + 1):
        t = k * bucket_seconds
        filled[t] = series.get(t, math.nan)
    return filled


def fleet_workers(points: Iterable[MetricPoint]) -> tuple[str, ...]:
    """The workers of the fleet: every ``WorkerIdentifier`` but the load generator's."""
    return tuple(sorted({p.worker for p in points if p.worker and p.operation != LOAD_GENERATOR_OPERATION}))


def metric_series(
    points: Sequence[MetricPoint], metric: Metric, time: TimeAxis, worker: str | None
) -> Series:
    """One metric's line as drawn: a counter as a rate per second over the whole span (zero where
    nothing was counted), a gauge as published with gaps; ``worker=None``: the fleet's line."""
    bucket = time.bucket_seconds

    def raw(publisher: str | None, statistic: Statistic) -> Series:
        return series_for(
            points,
            metric.name,
            statistic,
            bucket,
            publisher,
            start_millis=time.start_millis,
            operation=metric.operation,
        )

    if worker is None and metric.fold != metric.statistic:
        per_worker = [raw(w, metric.statistic) for w in fleet_workers(points)]
        buckets: dict[float, list[float]] = defaultdict(list)
        for line in per_worker:
            for t, value in line.items():
                buckets[t].append(value)
        folded = {t: _apply(metric.fold, values) for t, values in sorted(buckets.items())}
    else:
        folded = raw(worker, metric.statistic)
    if not folded:
        return {}
    return per_second(folded, bucket, time.span(points)) if metric.per_second else with_gaps(folded, bucket)


def formula_series(points: Sequence[MetricPoint], formula: Formula, time: TimeAxis) -> Series:
    """A formula's line: the sum of its terms' fleet lines times their factors (a term with no
    data counts as none where another has some), divided by ``over``'s line where that is above
    zero (NaN elsewhere: a ratio to nothing is no figure)."""
    terms = [(metric_series(points, metric, time, None), factor) for metric, factor in formula.terms]
    if all(not line for line, _ in terms):
        return {}
    buckets = sorted({t for line, _ in terms for t in line})
    total: Series = {}
    for t in buckets:
        values = [line[t] * factor for line, factor in terms if t in line and not math.isnan(line[t])]
        total[t] = sum(values) if values else math.nan
    if formula.over is None:
        return total
    divisor = metric_series(points, formula.over, time, None)
    return {t: value / divisor[t] if divisor.get(t, 0) > 0 else math.nan for t, value in total.items()}

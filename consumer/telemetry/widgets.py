"""The dashboard's widgets, as data: the local PNG renders them, the CDK dashboard can adopt them.

One list drives both so that what a developer sees locally is what an operator sees in CloudWatch
(lag, leases, throughput, throttles). Each widget names metrics from ``metric_names.py``; ``statistic`` is the
CloudWatch statistic over one period; ``per_worker`` draws one line per ``WorkerIdentifier``
(one colour per worker, the same colour in every widget); ``reference`` adds a computed line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Statistic = Literal["Sum", "Maximum", "Average"]


@dataclass(frozen=True)
class Widget:
    title: str
    metrics: tuple[str, ...]
    unit: str
    statistic: Statistic
    per_worker: bool = False
    reference: Literal["two_n"] | None = None


WIDGETS: tuple[Widget, ...] = (
    Widget("Records processed vs table writes", ("RecordsProcessed", "TableWrites"), "Count", "Sum"),
    Widget("Leases total vs 2N", ("TotalLeases",), "Count", "Maximum", reference="two_n"),
    Widget("Current leases per worker", ("CurrentLeases",), "Count", "Maximum", per_worker=True),
    Widget(
        "Leases table: consumed capacity and throttles",
        ("LeaseTableConsumedReadCapacity", "LeaseTableConsumedWriteCapacity", "LeaseTableThrottles"),
        "Count",
        "Sum",
    ),
    Widget(
        "MillisBehindLatest per worker", ("MillisBehindLatest",), "Milliseconds", "Maximum", per_worker=True
    ),
    Widget("CPU per worker", ("CpuUtilization",), "Percent", "Average", per_worker=True),
    Widget("Memory per worker", ("MemoryResident",), "Megabytes", "Maximum", per_worker=True),
    Widget(
        "Retries, dead letters, trimmed",
        ("RecordsRetried", "RecordsSentToDeadLetter", "RecordsTrimmedLost"),
        "Count",
        "Sum",
    ),
)

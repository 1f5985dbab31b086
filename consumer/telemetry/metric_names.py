"""Every metric the product publishes: name, unit, level and how a period is aggregated.

Names follow the Java KCL's where it has one (so dashboards and alarms built for KCL carry over);
the rest are this product's own. The table decides the metrics level, as KCL's ``metricsLevel``:

* SUMMARY - what an operator watches on the dashboard and alarms on: throughput, lag, lease counts,
  records retried / dead-lettered / lost, lease-loss shutdowns, the leases table's capacity and
  throttles, the worker's CPU and memory, and telemetry's own drops.
* DETAILED - everything else: per-call timings (``.Time`` / ``.Success``), lease taking and
  stealing internals, shard-sync runs, blocked children, processing latency.

``level: NONE`` records nothing. A name missing from the table is allowed (a user processor may
publish its own) and is treated as DETAILED.

Aggregation within one flush period: counts are summed; gauges keep the last value, or the
maximum where the worst value of the period is what matters (MillisBehindLatest); timings keep
every sample (CloudWatch computes percentiles from them).

Fleet series: a metric marked ``fleet`` is also published under ``[Operation]`` alone, one series
the whole fleet adds to, so a plain CloudWatch alarm can combine it in metric math with AWS's own
metrics (an alarm cannot mix a Metrics Insights query with other metrics). The scaling alarms read
three: ``RecordsProcessed`` (the fleet's throughput), ``LeaseTableScans`` (how many full scans the
leases table's Scan ReturnedItemCount is spread over) and ``OpenShards`` (N as the stream has it).

Shard-named series: a metric marked ``named_shard`` is published under ``[Operation, ShardId]``
whatever ``metrics.shard_id_dimension`` says. It is rare (``StalledShards``: a shard found stalled),
and an alarm on a Metrics Insights query grouped by ShardId then has each such shard as a
contributor, so the page names the shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum


class Level(Enum):
    NONE = 0
    SUMMARY = 1
    DETAILED = 2


class Aggregation(StrEnum):
    SUM = "sum"
    LAST = "last"
    MAX = "max"
    SAMPLES = "samples"


@dataclass(frozen=True)
class MetricSpec:
    name: str
    unit: str
    level: Level
    aggregation: Aggregation
    operation: str
    description: str
    fleet: bool = False  # also published without WorkerIdentifier (module docstring)
    named_shard: bool = False  # always published with [Operation, ShardId] too (module docstring)


# The demo's load generator publishes ``TableWrites`` under this operation, with its own
# ``WorkerIdentifier``: a publisher of metrics, not a worker of the fleet.
LOAD_GENERATOR_OPERATION = "LoadGenerator"

S, D = Level.SUMMARY, Level.DETAILED
SUM, LAST, MAX, SAMPLES = Aggregation.SUM, Aggregation.LAST, Aggregation.MAX, Aggregation.SAMPLES

CATALOGUE: tuple[MetricSpec, ...] = (
    # --- processing (KCL ProcessTask)
    MetricSpec(
        "RecordsProcessed", "Count", S, SUM, "ProcessTask", "Records the processor completed.", fleet=True
    ),
    MetricSpec("DataBytesProcessed", "Bytes", S, SUM, "ProcessTask", "Stream bytes of those records."),
    MetricSpec("MillisBehindLatest", "Milliseconds", S, MAX, "ProcessTask", "Age of the newest record read."),
    MetricSpec("RecordsRetried", "Count", S, SUM, "ProcessTask", "Records delivered again after a failure."),
    MetricSpec(
        "RecordsSentToDeadLetter", "Count", S, SUM, "ProcessTask", "Records the retry policy gave up on."
    ),
    MetricSpec("ProcessLatency", "Milliseconds", D, SAMPLES, "ProcessTask", "Record landed -> processed."),
    MetricSpec(
        "EndToEndLag",
        "Milliseconds",
        S,
        MAX,
        "ProcessTask",
        "Record written (its ApproximateCreationDateTime) -> handled: the oldest of each handled batch.",
        fleet=True,
    ),
    MetricSpec(
        "StalledShards",
        "Count",
        S,
        SUM,
        "ProcessTask",
        "Shards found stalled and released (worker.stall_timeout_millis).",
        fleet=True,
        named_shard=True,
    ),
    # --- per-key parallelism and tumbling windows (docs/processing.md)
    MetricSpec("LanesInFlight", "Count", S, MAX, "ProcessTask", "Lanes of one shard busy at once."),
    MetricSpec(
        "LaneRecordsInFlight", "Count", S, MAX, "ProcessTask", "Records in flight in a shard's fullest lane."
    ),
    MetricSpec(
        "SlowestLaneLag",
        "Milliseconds",
        S,
        MAX,
        "ProcessTask",
        "Age of the record the slowest lane holds the checkpoint at.",
    ),
    MetricSpec("WindowStateBytes", "Bytes", S, MAX, "ProcessTask", "Size of a tumbling window's state."),
    # --- a failing key parked (processing.on_failure: park_key)
    MetricSpec(
        "ParkedKeys", "Count", S, MAX, "ProcessTask", "Keys of a shard waiting behind a failed record."
    ),
    MetricSpec(
        "ParkedRecords",
        "Count",
        S,
        MAX,
        "ProcessTask",
        "Records a shard holds back behind parked keys (theirs, and those finished past the checkpoint).",
    ),
    # --- leases (KCL RenewAllLeases / TakeLeases)
    MetricSpec("CurrentLeases", "Count", S, LAST, "RenewAllLeases", "Leases this worker holds."),
    MetricSpec("LostLeases", "Count", S, SUM, "RenewAllLeases", "Leases lost at renewal."),
    MetricSpec("TakenLeases", "Count", D, SUM, "TakeLeases", "Leases taken (incl. stolen)."),
    MetricSpec("ExpiredLeases", "Count", D, LAST, "TakeLeases", "Expired leases seen by the taker."),
    MetricSpec("LeaseSpillover", "Count", D, LAST, "TakeLeases", "Leases over max_leases_for_worker."),
    MetricSpec("NumWorkers", "Count", S, LAST, "TakeLeases", "Workers seen in the leases table."),
    MetricSpec("TotalLeases", "Count", S, LAST, "TakeLeases", "Leases in the table (compare with 2N)."),
    MetricSpec("NeededLeases", "Count", D, LAST, "TakeLeases", "Leases this worker still wants."),
    MetricSpec(
        "ReadyLeasesUnassigned",
        "Count",
        S,
        LAST,
        "TakeLeases",
        "Ready shards no worker may take (at the cap).",
    ),
    MetricSpec(
        "LeasesNotTaken",
        "Count",
        S,
        LAST,
        "TakeLeases",
        "Ready leases left free past the stall timeout although workers had room.",
    ),
    MetricSpec("ShutdownsLeaseLost", "Count", S, SUM, "ShutdownTask", "Shard consumers stopped: LEASE_LOST."),
    MetricSpec(
        "ShardsBlockedOnParent", "Count", D, SUM, "BlockOnParentShardTask", "Child polls while parent runs."
    ),
    # --- fetching
    MetricSpec("ExpiredIterator", "Count", S, SUM, "Fetcher", "Shard iterators that expired."),
    MetricSpec("RecordsTrimmedLost", "Count", S, SUM, "Fetcher", "Trim events that lost unread records."),
    MetricSpec(
        "ReloadedGaps",
        "Count",
        S,
        SUM,
        "Reload",
        "Trim gaps repaired by a reload (worker.on_trimmed=reload).",
    ),
    MetricSpec("RecordsReloaded", "Count", S, SUM, "Reload", "Items re-delivered from the table by reloads."),
    MetricSpec("ReloadReadUnits", "Count", S, SUM, "Reload", "Read units the reloads' Scans consumed."),
    MetricSpec(
        "StreamReadRequests",
        "Count",
        S,
        SUM,
        "Fetcher",
        "GetRecords calls answered: what DynamoDB Streams bills.",
    ),
    # --- leases table (capacity and throttling: a throttled leases table is how KCL fleets lose leases)
    MetricSpec(
        "LeaseTableConsumedReadCapacity", "Count", S, SUM, "LeaseTable", "RCU consumed by this worker."
    ),
    MetricSpec(
        "LeaseTableConsumedWriteCapacity", "Count", S, SUM, "LeaseTable", "WCU consumed by this worker."
    ),
    MetricSpec("LeaseTableThrottles", "Count", S, SUM, "LeaseTable", "Throttled leases-table requests."),
    MetricSpec(
        "LeaseTableErrors",
        "Count",
        S,
        SUM,
        "LeaseTable",
        "Leases- or workers-table requests that failed after their retries (HTTP 5xx, timeouts, unreachable).",
    ),
    MetricSpec(
        "LeaseTableScans",
        "Count",
        S,
        SUM,
        "LeaseTable",
        "Complete Scans of the leases table (divides its Scan ReturnedItemCount into leases).",
        fleet=True,
    ),
    # --- the stream as the sync leader lists it
    MetricSpec(
        "OpenShards",
        "Count",
        S,
        LAST,
        "ShardSyncTask",
        "Open shards in the last full listing: N, one per partition.",
        fleet=True,
    ),
    # --- demo / load generator (compared with RecordsProcessed on the dashboard)
    MetricSpec(
        "TableWrites", "Count", S, SUM, LOAD_GENERATOR_OPERATION, "Item writes made to the source table."
    ),
    # --- process (CPU and memory per worker, sampled at each flush)
    MetricSpec(
        "CpuUtilization", "Percent", S, LAST, "Process", "CPU of this worker process (100 = one core)."
    ),
    MetricSpec("MemoryResident", "Megabytes", S, LAST, "Process", "Resident memory of this worker process."),
    # --- telemetry's own health
    MetricSpec("TelemetryDropped", "Count", S, SUM, "Telemetry", "Metric documents / log events dropped."),
    MetricSpec(
        "TelemetrySendFailures", "Count", S, SUM, "Telemetry", "Failed sends to a metrics/log transport."
    ),
)

# Timed operations publish <prefix>.Success (0/1) and <prefix>.Time (ms), both DETAILED as in KCL.
TIMED_PREFIXES: tuple[str, ...] = (
    "RenewLease",
    "TakeLease",
    "GetRecords",
    "UpdateLease",
    "ShardSyncTask",
    "InitializeTask",
    "ShutdownTask",
    "BlockOnParentShardTask",
    "RecordProcessor.processRecords",
)

_BY_NAME = {spec.name: spec for spec in CATALOGUE}


def spec_for(name: str) -> MetricSpec | None:
    return _BY_NAME.get(name)


def level_of(name: str) -> Level:
    spec = _BY_NAME.get(name)
    return spec.level if spec is not None else Level.DETAILED

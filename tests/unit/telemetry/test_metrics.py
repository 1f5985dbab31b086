from __future__ import annotations

import threading

import pytest

from consumer.telemetry.errors import MetricsError
from consumer.telemetry.metrics import MetricsRecorder, NullMetrics
from consumer.telemetry.transports import InMemoryTransport
from ground.clock import FakeClock
from tests.unit.telemetry.helpers import metric_sums, settings_with, units


def recorder(transport: InMemoryTransport, **metrics: object) -> MetricsRecorder:
    return MetricsRecorder(settings_with(**metrics), "w-1", transport, FakeClock(), sample_process=False)


def flushed(rec: MetricsRecorder, transport: InMemoryTransport) -> list[dict[str, object]]:
    rec.flush()
    rec.stop(timeout_seconds=2)
    return transport.documents  # type: ignore[return-value]


def test_counts_are_summed_per_period_into_one_document_per_operation() -> None:
    transport = InMemoryTransport()
    rec = recorder(transport)
    for _ in range(7):
        rec.count("ProcessTask", "RecordsRetried", 3, shard_id="shard-a")
    rec.count("ProcessTask", "DataBytesProcessed", 100, "Bytes", shard_id="shard-b")
    docs = flushed(rec, transport)
    assert len(docs) == 1
    doc = docs[0]
    assert doc["RecordsRetried"] == 21
    assert doc["DataBytesProcessed"] == 100
    assert doc["Operation"] == "ProcessTask" and doc["WorkerIdentifier"] == "w-1"
    assert "ShardId" not in doc
    directive = doc["_aws"]["CloudWatchMetrics"][0]  # type: ignore[index]
    assert directive["Namespace"] == "telemetry-test"
    assert directive["Dimensions"] == [["Operation", "WorkerIdentifier"]]
    assert units(docs) == {"RecordsRetried": "Count", "DataBytesProcessed": "Bytes"}


def test_fleet_metrics_also_go_to_one_series_per_operation_for_the_scaling_alarms() -> None:
    """RecordsProcessed, LeaseTableScans and OpenShards are also published under [Operation] alone, so
    a plain alarm can add them up over the fleet and combine them with AWS's metrics."""
    transport = InMemoryTransport()
    rec = recorder(transport)
    rec.count("ProcessTask", "RecordsProcessed", 21)
    rec.count("ProcessTask", "RecordsRetried", 2)
    rec.count("LeaseTable", "LeaseTableScans", 3)
    rec.gauge("ShardSyncTask", "OpenShards", 44, "Count")
    docs = flushed(rec, transport)
    dimensions = {
        name: d["_aws"]["CloudWatchMetrics"][0]["Dimensions"]  # type: ignore[index]
        for d in docs
        for name in ("RecordsProcessed", "RecordsRetried", "LeaseTableScans", "OpenShards")
        if name in d
    }
    fleet = [["Operation", "WorkerIdentifier"], ["Operation"]]
    assert dimensions == {
        "RecordsProcessed": fleet,
        "LeaseTableScans": fleet,
        "OpenShards": fleet,
        "RecordsRetried": [["Operation", "WorkerIdentifier"]],
    }
    assert metric_sums(docs)["RecordsProcessed"] == 21


@pytest.mark.parametrize("shard_dimension", [False, True])
def test_a_stalled_shard_is_named_whatever_the_shard_dimension_says(shard_dimension: bool) -> None:
    """StalledShards carries [Operation, ShardId]: the stalled-shards alarm groups a Metrics Insights
    query by ShardId, so each stalled shard is a contributor and the page names it; the fleet sum
    and the per-worker series are there too. Other metrics stay as the setting says."""
    transport = InMemoryTransport()
    rec = recorder(transport, shard_id_dimension=shard_dimension)
    rec.count("ProcessTask", "StalledShards", 1, shard_id="shard-a")
    rec.count("ProcessTask", "RecordsRetried", 2, shard_id="shard-a")
    docs = flushed(rec, transport)
    stalled = [d for d in docs if "StalledShards" in d]
    assert len(stalled) == 1 and stalled[0]["ShardId"] == "shard-a"
    assert stalled[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [  # type: ignore[index]
        ["Operation", "ShardId"],
        ["Operation"],
        ["Operation", "WorkerIdentifier"],
    ]
    retried = [d for d in docs if "RecordsRetried" in d]
    assert len(retried) == 1 and ("ShardId" in retried[0]) is shard_dimension


def test_shard_dimension_adds_a_per_shard_set_and_keeps_the_aggregate_set() -> None:
    transport = InMemoryTransport()
    rec = recorder(transport, shard_id_dimension=True)
    rec.count("ProcessTask", "RecordsProcessed", 5, shard_id="shard-a")
    rec.count("ProcessTask", "RecordsProcessed", 2, shard_id="shard-b")
    rec.count("ProcessTask", "RecordsProcessed", 1)
    docs = flushed(rec, transport)
    by_shard = {d.get("ShardId"): d for d in docs}
    assert set(by_shard) == {"shard-a", "shard-b", None}
    assert by_shard["shard-a"]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [  # type: ignore[index]
        ["Operation", "WorkerIdentifier", "ShardId"],
        ["Operation", "WorkerIdentifier"],
        ["Operation"],  # RecordsProcessed is a fleet metric
    ]
    assert metric_sums(docs)["RecordsProcessed"] == 8
    assert metric_sums(docs, ShardId="shard-a")["RecordsProcessed"] == 5


def test_gauges_keep_max_for_lag_and_last_for_lease_counts() -> None:
    transport = InMemoryTransport()
    rec = recorder(transport)
    for lag in (500, 9_000, 20):
        rec.gauge("ProcessTask", "MillisBehindLatest", lag, "Milliseconds", shard_id="s")
    for leases in (4, 6, 5):
        rec.gauge("RenewAllLeases", "CurrentLeases", leases, "Count")
    docs = {d["Operation"]: d for d in flushed(rec, transport)}
    assert docs["ProcessTask"]["MillisBehindLatest"] == 9_000
    assert docs["RenewAllLeases"]["CurrentLeases"] == 5


def test_timing_and_timed_publish_time_and_success_pairs() -> None:
    transport = InMemoryTransport()
    clock = FakeClock()
    rec = MetricsRecorder(settings_with(), "w-1", transport, clock, sample_process=False)
    rec.timing("RenewAllLeases", "RenewLease", 12, True)
    with rec.timed("RenewAllLeases", "RenewLease"):
        clock.advance(30)
    with pytest.raises(RuntimeError), rec.timed("RenewAllLeases", "RenewLease"):
        clock.advance(5)
        raise RuntimeError("conditional write failed")
    (doc,) = flushed(rec, transport)
    assert doc["RenewLease.Time"] == [12, 30, 5]
    assert doc["RenewLease.Success"] == [1, 1, 0]
    assert units([doc]) == {"RenewLease.Time": "Milliseconds", "RenewLease.Success": "Count"}


def test_summary_level_drops_detailed_metrics_and_none_records_nothing() -> None:
    transport = InMemoryTransport()
    rec = recorder(transport, level="SUMMARY")
    rec.count("ProcessTask", "RecordsProcessed", 1)
    rec.timing("Fetcher", "GetRecords", 3, True)
    rec.count("TakeLeases", "TakenLeases", 1)
    names = set(metric_sums(flushed(rec, transport)))
    assert names == {"RecordsProcessed"}

    quiet = InMemoryTransport()
    rec = recorder(quiet, level="NONE")
    rec.count("ProcessTask", "RecordsProcessed", 1)
    assert flushed(rec, quiet) == []


def test_bad_metrics_are_refused_with_a_message_naming_the_problem() -> None:
    rec = recorder(InMemoryTransport())
    with pytest.raises(MetricsError, match="not a CloudWatch unit"):
        rec.count("ProcessTask", "Custom", 1, "records")
    with pytest.raises(MetricsError, match="published in Bytes"):
        rec.count("ProcessTask", "DataBytesProcessed", 1, "Count")
    with pytest.raises(MetricsError, match="finite number"):
        rec.gauge("ProcessTask", "Custom", float("nan"), "Count")
    rec.count("ProcessTask", "Custom", 1, "Seconds")
    with pytest.raises(MetricsError, match="recorded in Seconds"):
        rec.count("ProcessTask", "Custom", 1, "Count")


def test_concurrent_counts_from_many_threads_add_up() -> None:
    transport = InMemoryTransport()
    rec = recorder(transport)

    def work() -> None:
        for _ in range(2_000):
            rec.count("ProcessTask", "RecordsProcessed", 1, shard_id="s")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        rec.flush()
    for t in threads:
        t.join()
    assert metric_sums(flushed(rec, transport))["RecordsProcessed"] == 16_000


def test_many_values_are_split_into_documents_of_at_most_100_values() -> None:
    transport = InMemoryTransport()
    rec = recorder(transport)
    for i in range(250):
        rec.timing("Fetcher", "GetRecords", i, True)
    docs = flushed(rec, transport)
    assert len(docs) == 3
    assert all(len(d["GetRecords.Time"]) <= 100 for d in docs)  # type: ignore[arg-type]
    assert metric_sums(docs)["GetRecords.Time"] == sum(range(250))


def test_process_sampler_publishes_cpu_and_memory() -> None:
    transport = InMemoryTransport()
    clock = FakeClock()
    rec = MetricsRecorder(settings_with(), "w-1", transport, clock)
    clock.advance(1_000)
    docs = flushed(rec, transport)
    process = next(d for d in docs if d["Operation"] == "Process")
    assert process["MemoryResident"] > 1  # type: ignore[operator]
    assert process["CpuUtilization"] >= 0  # type: ignore[operator]
    assert units([process]) == {"CpuUtilization": "Percent", "MemoryResident": "Megabytes"}


def test_null_metrics_accepts_the_same_calls() -> None:
    NullMetrics().count("ProcessTask", "RecordsProcessed", 3, "Count", "s")
    NullMetrics().gauge("ProcessTask", "MillisBehindLatest", 3, "Milliseconds", "s")
    NullMetrics().timing("Fetcher", "GetRecords", 3, True)

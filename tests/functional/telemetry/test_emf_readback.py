"""EMF documents shipped to CloudWatch Logs (moto) and read back: names, units, dimensions, sums."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.transports import transport_from_settings
from ground.settings import Settings
from tools.dashboard.readback import points_of_all, read_log_group


def _settings(endpoint: str, shard_dimension: bool) -> Settings:
    return Settings.model_validate(
        {
            "application_name": f"emf-{uuid.uuid4().hex[:8]}",
            "endpoint_url": endpoint,
            "table": {"name": "orders", "partition_key": {"name": "pk"}},
            "metrics": {
                "destination": "logs",
                "shard_id_dimension": shard_dimension,
                "flush_interval_seconds": 0.1,
            },
        }
    )


class CountingProcessor:
    """Stands in for a record processor: counts what it saw, per shard."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def process(self, shard_id: str, records: int) -> None:
        with self._lock:
            self.seen[shard_id] = self.seen.get(shard_id, 0) + records


def _run_workers(settings: Settings, logs_client: Any) -> CountingProcessor:
    processor = CountingProcessor()
    recorders = [
        MetricsRecorder(settings, worker, transport_from_settings(settings, worker, logs_client))
        for worker in ("worker-a", "worker-b")
    ]

    def shard_loop(recorder: MetricsRecorder, shard_id: str, batches: int) -> None:
        for batch in range(batches):
            size = 1 + (batch * 7) % 13
            processor.process(shard_id, size)
            recorder.count("ProcessTask", "RecordsProcessed", size, shard_id=shard_id)
            recorder.count("ProcessTask", "DataBytesProcessed", size * 120, "Bytes", shard_id=shard_id)
            recorder.gauge("ProcessTask", "MillisBehindLatest", 100 * batch, "Milliseconds", shard_id)
            recorder.timing("Fetcher", "GetRecords", 3 + batch % 5, True)
        recorder.gauge("RenewAllLeases", "CurrentLeases", 2, "Count")

    try:
        for recorder in recorders:
            recorder.start()
        threads = [
            threading.Thread(target=shard_loop, args=(recorders[i % 2], f"shardId-{i:04d}", 40 + i))
            for i in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        for recorder in recorders:
            recorder.stop(timeout_seconds=10)
    return processor


@pytest.mark.parametrize("shard_dimension", [False, True], ids=["aggregated", "per-shard"])
def test_documents_read_back_from_logs_add_up(
    logs_client: Any, moto_endpoint: str, shard_dimension: bool
) -> None:
    settings = _settings(moto_endpoint, shard_dimension)
    processor = _run_workers(settings, logs_client)

    documents = read_log_group(logs_client, settings.metrics_log_group)
    points = points_of_all(documents)
    assert points, "no EMF documents were shipped"

    assert {p.namespace for p in points} == {settings.metrics_namespace}
    units = {(p.name, p.unit) for p in points}
    assert ("RecordsProcessed", "Count") in units
    assert ("DataBytesProcessed", "Bytes") in units
    assert ("MillisBehindLatest", "Milliseconds") in units
    assert ("GetRecords.Time", "Milliseconds") in units
    assert ("GetRecords.Success", "Count") in units
    assert ("CpuUtilization", "Percent") in units and ("MemoryResident", "Megabytes") in units
    assert all(p.operation and p.worker in ("worker-a", "worker-b") for p in points)

    processed = [p for p in points if p.name == "RecordsProcessed"]
    assert sum(sum(p.values) for p in processed) == sum(processor.seen.values())
    assert sum(sum(p.values) for p in points if p.name == "DataBytesProcessed") == 120 * sum(
        processor.seen.values()
    )

    # RecordsProcessed is a fleet metric: also one series per operation, for the scaling alarms.
    fleet = (("Operation",),)
    if shard_dimension:
        assert {p.shard_id for p in processed} == set(processor.seen)
        for shard_id, seen in processor.seen.items():
            assert sum(sum(p.values) for p in processed if p.shard_id == shard_id) == seen
        assert all(
            p.dimension_sets
            == (("Operation", "WorkerIdentifier", "ShardId"), ("Operation", "WorkerIdentifier"), *fleet)
            for p in processed
        )
    else:
        assert {p.shard_id for p in points} == {None}
        assert all(
            p.dimension_sets
            == (("Operation", "WorkerIdentifier"), *(fleet if p.name == "RecordsProcessed" else ()))
            for p in points
        )

    lag = [p for p in points if p.name == "MillisBehindLatest"]
    assert max(v for p in lag for v in p.values) == 100 * (40 + 3 - 1)

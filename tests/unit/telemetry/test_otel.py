"""The OpenTelemetry backend: KCL 3.5's names, instrument kinds and attributes, the messaging
conventions and the end-to-end lag, read back from the SDK's in-memory reader; EMF unchanged."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Sum

from consumer.telemetry.health import TransportHealth
from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.otel import OtelMirror, otel_name
from consumer.telemetry.transports import InMemoryTransport, transport_from_settings
from ground.clock import FakeClock
from tests.unit.telemetry.helpers import settings_with

SHARD = "shardId-00000001763798400000-0000abcd"


@pytest.mark.parametrize(
    ("name", "unit", "expected"),
    [
        ("RecordsProcessed", "Count", "aws.kinesis.client.records_processed"),
        ("MillisBehindLatest", "Milliseconds", "aws.kinesis.client.consumer.lag.duration"),
        ("GetRecords.Time", "Milliseconds", "aws.kinesis.client.get_records.duration"),
        ("GetRecords.Success", "Count", "aws.kinesis.client.get_records.success"),
        (
            "RecordProcessor.processRecords.Time",
            "Milliseconds",
            "aws.kinesis.client.record_processor.process_records.duration",
        ),
        ("EndToEndLag", "Milliseconds", "aws.kinesis.client.end_to_end_lag.duration"),
        ("CurrentLeases", "Count", "aws.kinesis.client.current_leases"),
        ("DataBytesProcessed", "Bytes", "aws.kinesis.client.data_bytes_processed"),
    ],
)
def test_kcl_names(name: str, unit: str, expected: str) -> None:
    assert otel_name(name, unit) == expected


def exported(reader: InMemoryMetricReader) -> dict[str, tuple[str, Any, list[dict[str, Any]]]]:
    """metric name -> (its meter, its data, the attributes of its points)."""
    found: dict[str, tuple[str, Any, list[dict[str, Any]]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                points = [dict(p.attributes or {}) for p in metric.data.data_points]
                found[metric.name] = (scope.scope.name, metric, points)
    return found


def record_a_period(shard_dimension: bool) -> tuple[dict[str, Any], list[dict[str, object]], Any]:
    settings = settings_with(backend="both", shard_id_dimension=shard_dimension)
    reader = InMemoryMetricReader()
    transport = InMemoryTransport()
    mirror = OtelMirror(settings, "w-1", reader=reader)
    rec = MetricsRecorder(settings, "w-1", transport, FakeClock(), sample_process=False, mirror=mirror)
    rec.count("ProcessTask", "RecordsProcessed", 7, shard_id=SHARD)
    rec.gauge("ProcessTask", "MillisBehindLatest", 1500, "Milliseconds", SHARD)
    rec.gauge("ProcessTask", "EndToEndLag", 2500, "Milliseconds", SHARD)
    rec.timing("ProcessTask", "RecordProcessor.processRecords", 40, True)
    rec.gauge("RenewAllLeases", "CurrentLeases", 3, "Count")
    rec.count("TakeLeases", "TakenLeases", 1)
    metrics = exported(reader)
    rec.flush()
    resource = reader.get_metrics_data().resource_metrics[0].resource  # type: ignore[union-attr]
    rec.stop(timeout_seconds=2)
    return metrics, transport.documents, resource


def test_each_figure_is_a_kcl_named_instrument_of_its_kind_with_its_attributes() -> None:
    metrics, _, resource = record_a_period(shard_dimension=True)
    assert resource.attributes["service.name"] == "telemetry-test"
    assert resource.attributes["service.instance.id"] == "w-1"
    meter, metric, points = metrics["aws.kinesis.client.records_processed"]
    assert meter == "software.amazon.kinesis" and isinstance(metric.data, Sum) and metric.data.is_monotonic
    assert metric.data.data_points[0].value == 7
    assert points == [
        {
            "aws.kinesis.operation": "ProcessTask",
            "aws.kinesis.consumer.name": "telemetry-test",
            "aws.kinesis.stream_name": "orders",
            "aws.kinesis.shard.id": SHARD,
        }
    ]
    _, lag, _ = metrics["aws.kinesis.client.consumer.lag.duration"]
    assert isinstance(lag.data, Histogram) and lag.unit == "s" and lag.data.data_points[0].sum == 1.5
    _, end_to_end, points = metrics["aws.kinesis.client.end_to_end_lag.duration"]
    assert isinstance(end_to_end.data, Histogram) and end_to_end.data.data_points[0].max == 2.5
    assert points[0]["aws.kinesis.shard.id"] == SHARD
    _, leases, points = metrics["aws.kinesis.client.current_leases"]
    assert isinstance(leases.data, Gauge) and leases.data.data_points[0].value == 3
    assert points == [
        {
            "aws.kinesis.operation": "RenewAllLeases",
            "aws.kinesis.consumer.name": "telemetry-test",
            "aws.kinesis.stream_name": "orders",
        }
    ]
    _, taken, _ = metrics["aws.kinesis.client.taken_leases"]
    assert isinstance(taken.data, Sum)
    # The messaging conventions, where they apply.
    meter, consumed, points = metrics["messaging.client.consumed.messages"]
    assert meter == "dynamodb-stream-fleet" and consumed.data.data_points[0].value == 7
    assert points[0]["messaging.destination.name"] == "orders"
    assert points[0]["messaging.destination.partition.id"] == SHARD
    assert points[0]["messaging.system"] == "aws_dynamodb_streams"
    _, duration, _ = metrics["messaging.process.duration"]
    assert duration.unit == "s" and duration.data.data_points[0].sum == pytest.approx(0.04)


def test_the_shard_attribute_follows_the_emf_shard_dimension_and_emf_is_unchanged() -> None:
    metrics, documents, _ = record_a_period(shard_dimension=False)
    for name in ("aws.kinesis.client.records_processed", "aws.kinesis.client.end_to_end_lag.duration"):
        assert all("aws.kinesis.shard.id" not in point for point in metrics[name][2])
    assert all(
        "messaging.destination.partition.id" not in p
        for p in metrics["messaging.client.consumed.messages"][2]
    )
    # The EMF documents of the same period are what the emf backend writes: the lag per worker and,
    # a fleet metric, under [Operation] alone too.
    lag = [d for d in documents if "EndToEndLag" in d]
    assert [d["EndToEndLag"] for d in lag] == [2500.0]
    directive = lag[0]["_aws"]["CloudWatchMetrics"][0]  # type: ignore[index]
    assert directive["Dimensions"] == [["Operation", "WorkerIdentifier"], ["Operation"]]


def test_the_backend_decides_where_the_emf_documents_go() -> None:
    assert type(
        transport_from_settings(settings_with(backend="otel", destination="stdout"), "w")
    ).__name__ == ("NullTransport")
    assert type(
        transport_from_settings(settings_with(backend="both", destination="stdout"), "w")
    ).__name__ == ("StdoutTransport")
    emf_only = MetricsRecorder(settings_with(), "w", InMemoryTransport(), FakeClock(), sample_process=False)
    assert emf_only._mirror is None


@pytest.mark.parametrize("endpoint", ["127.0.0.1:4318", "http://127.0.0.1:4318/v1/metrics", "grpc://h:4317"])
def test_an_otlp_endpoint_that_is_no_collector_address_is_refused(endpoint: str) -> None:
    with pytest.raises(ValueError, match="http://127.0.0.1:4318"):
        settings_with(otlp_endpoint=endpoint)


def test_the_recorders_flush_exports_and_a_collector_that_is_down_counts_as_a_send_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No thread of the SDK's own (every loop of a worker is made by ground.threads): the period is
    exported by the recorder's flush; a refused export is a TelemetrySendFailures, never an error."""
    monkeypatch.setattr("consumer.telemetry.otel.EXPORT_TIMEOUT_SECONDS", 0.5)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings = settings_with(backend="both", otlp_endpoint=f"http://127.0.0.1:{port}")
    before = {thread.name for thread in threading.enumerate()}
    clock = FakeClock()
    health = TransportHealth(clock)
    transport = InMemoryTransport()
    rec = MetricsRecorder(settings, "w-1", transport, clock, health=health, sample_process=False)
    assert {thread.name for thread in threading.enumerate()} - before == set()
    rec.count("ProcessTask", "RecordsProcessed", 3, shard_id=SHARD)
    rec.flush()
    assert health.totals().send_failures >= 1
    rec.flush()  # the failure of the last period is counted in this one's EMF documents
    rec.stop(timeout_seconds=2)
    assert any("TelemetrySendFailures" in document for document in transport.documents)
    assert {thread.name for thread in threading.enumerate()} - before == set()

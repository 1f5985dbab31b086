"""``metrics.backend: both``: a real ``consumer run`` process exports its metrics over OTLP/HTTP to a
collector stand-in started here (a small HTTP server decoding each ``ExportMetricsServiceRequest``
with the opentelemetry-proto package), with KCL 3.5's names, kinds and attributes and the
end-to-end lag, while its EMF documents still reach the agent's port as before.

moto stands in for DynamoDB; the two listeners and the worker are stopped in ``finally`` blocks
(their context managers), whatever happens.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from ground.settings import load_settings
from tests.e2e.test_metrics_reach_agent import (
    KCL_METRICS,
    AgentStandIn,
    metric_total,
    published_names,
    wait_until,
)
from tests.support import create_orders_table
from tools.demo.fleet import LocalFleet

pytestmark = pytest.mark.e2e

WRITES = 12
KCL_NAMES = {
    "aws.kinesis.client.records_processed",
    "aws.kinesis.client.consumer.lag.duration",
    "aws.kinesis.client.end_to_end_lag.duration",
    "aws.kinesis.client.current_leases",
    "aws.kinesis.client.get_records.duration",
}


class Collector:
    """What an OpenTelemetry collector's OTLP/HTTP receiver gets: every data point, decoded."""

    def __init__(self) -> None:
        self.points: list[dict[str, Any]] = []
        self.paths: set[str] = set()
        self.lock = threading.Lock()

    def take(self, path: str, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_metrics in request.resource_metrics:
            resource = {a.key: a.value.string_value for a in resource_metrics.resource.attributes}
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        found.append(
                            {
                                "scope": scope_metrics.scope.name,
                                "name": metric.name,
                                "kind": kind,
                                "unit": metric.unit,
                                "resource": resource,
                                "attributes": {a.key: a.value.string_value for a in point.attributes},
                                "value": point.as_double or point.as_int
                                if kind in ("sum", "gauge")
                                else point.sum,
                                "count": getattr(point, "count", None),
                            }
                        )
        with self.lock:
            self.paths.add(path)
            self.points += found

    def named(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [p for p in self.points if p["name"] == name]


@contextmanager
def collector() -> Iterator[tuple[Collector, str]]:
    received = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.take(self.path, body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="otlp-stand-in")
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield received, f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_worker_exports_kcl_named_metrics_and_the_lag_over_otlp_and_emf_as_before(
    config_dir: Path, moto_endpoint: str, tmp_path: Path
) -> None:
    with AgentStandIn() as agent, collector() as (received, endpoint):
        environ = {
            "CONSUMER_METRICS__BACKEND": "both",
            "CONSUMER_METRICS__OTLP_ENDPOINT": endpoint,
            "CONSUMER_METRICS__DESTINATION": "agent",
            "CONSUMER_METRICS__AGENT_ENDPOINT": agent.endpoint,
            "CONSUMER_METRICS__SHARD_ID_DIMENSION": "true",
        }
        settings = load_settings("e2e", config_dir, environ=environ)
        assert settings.metrics.backend == "both"
        ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_endpoint)
        create_orders_table(ddb, settings.table.name)
        for n in range(WRITES):
            ddb.put_item(TableName=settings.table.name, Item={"pk": {"S": f"k{n}"}, "sk": {"S": "v"}})
        with LocalFleet("e2e", config_dir, tmp_path / "logs", environ=environ) as fleet:
            worker = fleet.start_worker()

            def arrived() -> bool:
                totals = sum(p["value"] for p in received.named("aws.kinesis.client.records_processed"))
                names = {p["name"] for p in received.points}
                return totals >= WRITES and names >= KCL_NAMES

            assert wait_until(arrived, 90), worker.log_path.read_text()[-3000:]
            assert fleet.terminate(worker.name) == 0, worker.log_path.read_text()[-3000:]
        documents = agent.documents()

    assert received.paths == {"/v1/metrics"}
    processed = received.named("aws.kinesis.client.records_processed")
    assert {p["scope"] for p in processed} == {"software.amazon.kinesis"} and {
        p["kind"] for p in processed
    } == {"sum"}
    # Cumulative sums: the last point of each series is its total, exactly the records written.
    assert max(p["value"] for p in processed) == WRITES
    shard_ids = {p["attributes"].get("aws.kinesis.shard.id") for p in processed}
    assert len(shard_ids) == 1 and next(iter(shard_ids), "").startswith("shardId-")
    for point in processed:
        assert point["attributes"]["aws.kinesis.stream_name"] == settings.table.name
        assert point["attributes"]["aws.kinesis.operation"] == "ProcessTask"
        assert point["attributes"]["aws.kinesis.consumer.name"] == settings.application_name
        assert point["resource"]["service.name"] == settings.application_name
        assert point["resource"]["service.instance.id"].startswith(f"{worker.name}@")
    for lag_name in (
        "aws.kinesis.client.consumer.lag.duration",
        "aws.kinesis.client.end_to_end_lag.duration",
    ):
        lags = received.named(lag_name)
        assert {p["kind"] for p in lags} == {"histogram"} and {p["unit"] for p in lags} == {"s"}
        assert all(p["attributes"]["aws.kinesis.shard.id"] in shard_ids for p in lags)
        assert max(p["count"] for p in lags) >= 1
    assert {p["kind"] for p in received.named("aws.kinesis.client.current_leases")} == {"gauge"}
    consumed = received.named("messaging.client.consumed.messages")
    assert max(p["value"] for p in consumed) == WRITES
    assert consumed[0]["attributes"]["messaging.destination.name"] == settings.table.name
    assert received.named("messaging.process.duration")

    # EMF unchanged: the same KCL metrics, the lag per worker and fleet-wide, the same count.
    names = set().union(*(published_names(d) for d in documents))
    assert names >= KCL_METRICS | {"EndToEndLag"}, sorted(names)
    assert metric_total(documents, "RecordsProcessed") == WRITES
    lag_sets = [d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] for d in documents if "EndToEndLag" in d]
    assert lag_sets and all(["Operation"] in sets for sets in lag_sets)  # fleet-wide
    assert all(["Operation", "WorkerIdentifier", "ShardId"] in sets for sets in lag_sets)  # per shard

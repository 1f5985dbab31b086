"""The metrics path of an instance, on this machine: a real ``consumer run`` process ships its EMF
documents to a TCP listener standing in for the CloudWatch agent (on an instance: 127.0.0.1:25888,
``metrics.agent_endpoint``; here a free port through the same setting), and every document names
the log group the stack creates and grants (``_aws.LogGroupName``), so the agent does not fall back
to ``emf/logs/default``. Names are scoped by environment as in dev and prod (``scope_names_by_env``).

moto stands in for DynamoDB and CloudWatch Logs. The listener and the worker are stopped in
``finally`` blocks (the fleet's and the listener's context managers), whatever happens.
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
import pytest

from consumer.telemetry.transports import log_stream_name
from ground.settings import load_settings
from tests.support import create_orders_table
from tools.demo.fleet import LocalFleet

pytestmark = pytest.mark.e2e

WRITES = 12
# KCL's metric names, as the dashboard and the alarms query them.
KCL_METRICS = {"RecordsProcessed", "MillisBehindLatest", "CurrentLeases", "NumWorkers", "TotalLeases"}


class AgentStandIn:
    """Accepts connections on 127.0.0.1 and keeps every line received, as the agent's EMF listener."""

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._lock = threading.Lock()
        lines, lock = self._lines, self._lock

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for line in self.rfile:
                    with lock:
                        lines.append(line)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-stand-in")

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"tcp://{host}:{port}"

    def documents(self) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(line) for line in self._lines]

    def __enter__(self) -> AgentStandIn:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def metric_total(documents: list[dict[str, Any]], name: str) -> float:
    total = 0.0
    for document in documents:
        value = document.get(name)
        if value is None:
            continue
        total += sum(value) if isinstance(value, list) else float(value)
    return total


def published_names(document: dict[str, Any]) -> set[str]:
    return {m["Name"] for block in document["_aws"]["CloudWatchMetrics"] for m in block["Metrics"]}


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.25)
    return condition()


def test_a_workers_emf_documents_reach_the_agent_port_naming_their_log_group(
    config_dir: Path, moto_endpoint: str, tmp_path: Path
) -> None:
    with AgentStandIn() as agent:
        environ = {
            "CONSUMER_METRICS__DESTINATION": "agent",
            "CONSUMER_METRICS__AGENT_ENDPOINT": agent.endpoint,
            "CONSUMER_SCOPE_NAMES_BY_ENV": "true",
        }
        settings = load_settings("e2e", config_dir, environ=environ)
        assert settings.metrics_log_group == "/e2e-fleet-e2e/metrics"
        assert settings.metrics_namespace == "e2e-fleet-e2e"
        ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_endpoint)
        create_orders_table(ddb, settings.table.name)
        for n in range(WRITES):
            ddb.put_item(TableName=settings.table.name, Item={"pk": {"S": f"k{n}"}, "sk": {"S": "v"}})
        with LocalFleet("e2e", config_dir, tmp_path / "logs", environ=environ) as fleet:
            worker = fleet.start_worker()
            delivered = wait_until(lambda: metric_total(agent.documents(), "RecordsProcessed") >= WRITES, 90)
            assert delivered, worker.log_path.read_text()[-3000:]
            assert fleet.terminate(worker.name) == 0, worker.log_path.read_text()[-3000:]
        # The worker flushed its last period at shutdown and closed its connection.
        documents = agent.documents()

    assert documents
    for document in documents:
        meta = document["_aws"]
        assert meta["LogGroupName"] == settings.metrics_log_group, meta
        # One stream per worker process; the worker id holds ':' which CloudWatch Logs refuses.
        assert meta["LogStreamName"] == log_stream_name(document["WorkerIdentifier"])
        assert meta["LogStreamName"].startswith(f"{worker.name}@") and ":" not in meta["LogStreamName"]
        assert {block["Namespace"] for block in meta["CloudWatchMetrics"]} == {settings.metrics_namespace}
    names = set().union(*(published_names(d) for d in documents))
    assert names >= KCL_METRICS, sorted(names)
    # Exactly the records written, each processed once: the documents are the worker's real counts.
    assert metric_total(documents, "RecordsProcessed") == WRITES

"""A metrics transport that is down costs a WARN and a counter: no exception, no stall."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Sequence

import pytest

from consumer.telemetry.errors import TransportError
from consumer.telemetry.health import TransportHealth
from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.shipper import BackgroundShipper
from consumer.telemetry.transports import AgentTransport, InMemoryTransport
from ground.clock import FakeClock
from tests.unit.telemetry.helpers import metric_sums, settings_with


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends: nobody listens


def test_agent_not_listening_warns_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    settings = settings_with(destination="agent", agent_endpoint=f"tcp://127.0.0.1:{_closed_port()}")
    recorder = MetricsRecorder(
        settings,
        "w-down",
        AgentTransport(settings.metrics.agent_endpoint, 0.5, log_group=settings.metrics_log_group),
    )
    done = threading.Event()

    def worker() -> None:
        for _ in range(1_000):
            recorder.count("ProcessTask", "RecordsProcessed", 1, shard_id="s")
        recorder.flush()
        done.set()

    with caplog.at_level(logging.WARNING, logger="consumer.telemetry.transport"):
        recorder.start()
        thread = threading.Thread(target=worker)
        thread.start()
        assert done.wait(timeout=20), "recording stalled while the agent was down"
        recorder.stop(timeout_seconds=2)
        thread.join()
    totals = recorder.health.totals()
    assert totals.send_failures >= 1
    assert totals.dropped >= 1  # what was still queued at shutdown
    assert any("not reachable" in r.getMessage() for r in caplog.records)


def test_agent_transport_delivers_lines_to_a_listening_agent() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(10)
        transport = AgentTransport(f"tcp://127.0.0.1:{server.getsockname()[1]}", log_group="/app/metrics")
        try:
            transport.send(['{"a": 1, "_aws": {"Timestamp": 5}}', '{"b": 2}'])
            connection, _ = server.accept()
            with connection:
                connection.settimeout(10)
                received = b""
                while received.count(b"\n") < 2:
                    received += connection.recv(4096)
        finally:
            transport.close()
    # Each line names the log group the agent must write it to (aws-embedded-metrics does the same).
    assert [json.loads(line) for line in received.decode().splitlines()] == [
        {"a": 1, "_aws": {"Timestamp": 5, "LogGroupName": "/app/metrics"}},
        {"b": 2, "_aws": {"LogGroupName": "/app/metrics"}},
    ]


def test_bad_agent_endpoint_is_refused_with_the_setting_name() -> None:
    with pytest.raises(TransportError, match=r"metrics\.agent_endpoint"):
        AgentTransport("127.0.0.1:25888", log_group="/app/metrics")


class FlakyTransport:
    """Fails the first ``failures`` sends, then stores what it gets."""

    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.inner = InMemoryTransport()

    def send(self, documents: Sequence[str]) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise TransportError("listener restarting")
        self.inner.send(documents)

    def close(self) -> None:
        self.inner.close()


def test_failures_are_published_as_telemetry_counters_once_the_transport_is_back() -> None:
    transport = FlakyTransport(failures=2)
    recorder = MetricsRecorder(
        settings_with(), "w-1", transport, FakeClock(), sample_process=False, retry_millis=10
    )
    recorder.start()
    try:
        recorder.count("ProcessTask", "RecordsProcessed", 5)
        recorder.flush()
        assert recorder.wait_sent(timeout_seconds=20)
        recorder.flush()  # publishes the failures counted meanwhile
    finally:
        recorder.stop(timeout_seconds=5)
    sums = metric_sums(transport.inner.documents)
    assert sums["RecordsProcessed"] == 5  # retried, not lost
    assert sums["TelemetrySendFailures"] == 2


def test_bounded_queue_drops_the_oldest_and_counts_them() -> None:
    health = TransportHealth(FakeClock())
    transport = InMemoryTransport()
    shipper = BackgroundShipper(transport, health, max_queued=3)
    shipper.submit(["1", "2", "3", "4", "5"])
    shipper.close()
    assert [str(d) for d in transport.documents] == ["3", "4", "5"]
    assert health.totals().dropped == 2

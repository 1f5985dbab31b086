"""Where EMF documents go: the CloudWatch agent, CloudWatch Logs, stdout, a file, memory.

A transport's ``send`` is called only from the shipper's background thread (``shipper.py``), never from
record processing, and raises :class:`TransportError` on any failure; the shipper turns that into a WARN,
a counter and a retry. Transports therefore stay simple and synchronous.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from consumer.telemetry.errors import TransportError
from ground.settings import Settings

# CloudWatch Logs PutLogEvents limits.
MAX_EVENTS_PER_PUT = 10_000
MAX_BYTES_PER_PUT = 1_048_576
EVENT_OVERHEAD_BYTES = 26


class MetricsTransport(Protocol):
    name: str

    def send(self, documents: Sequence[str]) -> None: ...

    def close(self) -> None: ...


class InMemoryTransport:
    """Keeps every document; for tests and for reading metrics back in-process."""

    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._documents: list[str] = []

    def send(self, documents: Sequence[str]) -> None:
        with self._lock:
            self._documents.extend(documents)

    def close(self) -> None:
        """Nothing to release: the documents stay readable after close."""

    @property
    def documents(self) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(d) for d in self._documents]


class NullTransport:
    """``metrics.destination: none``: documents are built (levels still apply) and discarded."""

    name = "none"

    def send(self, documents: Sequence[str]) -> None:
        del documents

    def close(self) -> None:
        """Nothing to release."""


class StdoutTransport:
    """One JSON document per line; CloudWatch Logs ingests EMF from a container's stdout."""

    name = "stdout"

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, documents: Sequence[str]) -> None:
        stream = self._stream or sys.stdout
        try:
            with self._lock:
                for document in documents:
                    stream.write(document + "\n")
                stream.flush()
        except (OSError, ValueError) as exc:
            raise TransportError(f"cannot write metrics to stdout: {exc}") from exc

    def close(self) -> None:
        """stdout belongs to the process, not to the transport."""


class JsonlFileTransport:
    """Appends documents to a JSON Lines file (``consumer dashboard --from-file`` reads it)."""

    name = "file"

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()

    def send(self, documents: Sequence[str]) -> None:
        try:
            with self._lock:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                with self._path.open("a", encoding="utf-8") as handle:
                    handle.writelines(d + "\n" for d in documents)
        except OSError as exc:
            raise TransportError(f"cannot append metrics to {self._path}: {exc}") from exc

    def close(self) -> None:
        """The file is opened per send."""


class AgentTransport:
    """The CloudWatch agent's EMF listener (``tcp://host:port`` or ``udp://host:port``, port 25888).

    Each document names its destination in its ``_aws`` metadata, as aws-embedded-metrics' own
    agent transport does: ``LogGroupName`` (without it the agent writes to ``emf/logs/default``, which
    the instance role may neither create nor write) and ``LogStreamName`` when given. TCP keeps one
    connection and reconnects after a failure; each document is one line.
    """

    name = "agent"

    def __init__(
        self,
        endpoint: str,
        timeout_seconds: float = 2.0,
        *,
        log_group: str,
        log_stream: str | None = None,
    ) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("tcp", "udp") or not parts.hostname or parts.port is None:
            raise TransportError(
                f"metrics.agent_endpoint {endpoint!r} must look like tcp://127.0.0.1:25888 or "
                "udp://127.0.0.1:25888"
            )
        if not log_group:
            raise TransportError(
                "the agent transport needs the log group its documents go to (metrics.log_group)"
            )
        self._scheme = parts.scheme
        self._address = (parts.hostname, parts.port)
        self._timeout = timeout_seconds
        self._destination = {"LogGroupName": log_group}
        if log_stream:
            self._destination["LogStreamName"] = log_stream
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()

    def addressed(self, document: str) -> str:
        """``document`` with the log group (and stream) in its ``_aws`` metadata.

        A line that is not a JSON object is passed on unchanged rather than refused: a refused
        document would be retried for ever and hold up every document queued behind it.
        """
        try:
            body = json.loads(document)
        except ValueError:
            return document
        if not isinstance(body, dict):
            return document
        meta = body.get("_aws")
        if not isinstance(meta, dict):
            meta = body["_aws"] = {}
        meta.update(self._destination)
        return json.dumps(body, separators=(",", ":"))

    def send(self, documents: Sequence[str]) -> None:
        documents = [self.addressed(d) for d in documents]
        with self._lock:
            try:
                if self._scheme == "udp":
                    self._send_udp(documents)
                else:
                    self._send_tcp(documents)
            except OSError as exc:
                self._drop_connection()
                raise TransportError(
                    f"CloudWatch agent at {self._scheme}://{self._address[0]}:{self._address[1]} "
                    f"not reachable: {exc}"
                ) from exc

    def _send_tcp(self, documents: Sequence[str]) -> None:
        if self._socket is None:
            self._socket = socket.create_connection(self._address, timeout=self._timeout)
        payload = "".join(d + "\n" for d in documents).encode("utf-8")
        self._socket.sendall(payload)

    def _send_udp(self, documents: Sequence[str]) -> None:
        if self._socket is None:
            self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._socket.settimeout(self._timeout)
        for document in documents:
            self._socket.sendto((document + "\n").encode("utf-8"), self._address)

    def _drop_connection(self) -> None:
        if self._socket is not None:
            try:
                self._socket.close()
            finally:
                self._socket = None

    def close(self) -> None:
        with self._lock:
            self._drop_connection()


class CloudWatchLogsTransport:
    """PutLogEvents into the metrics log group; CloudWatch extracts the metrics from EMF there.

    Used locally against the emulator (or moto) so that the documents can be read back; on AWS
    the agent transport is cheaper. The group and stream are created on first use.
    """

    name = "cloudwatch-logs"

    def __init__(self, logs_client: Any, log_group: str, log_stream: str) -> None:
        self._client = logs_client
        self._group = log_group
        self._stream = log_stream
        self._ready = False
        self._lock = threading.Lock()

    def send(self, documents: Sequence[str]) -> None:
        events: list[dict[str, Any]] = sorted(
            ({"timestamp": _document_timestamp(d), "message": d} for d in documents),
            key=lambda e: e["timestamp"],
        )
        with self._lock:
            try:
                self._ensure_stream()
                for batch in _batches(events):
                    self._client.put_log_events(
                        logGroupName=self._group, logStreamName=self._stream, logEvents=batch
                    )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                    self._ready = False
                raise TransportError(f"PutLogEvents to {self._group}/{self._stream} failed: {exc}") from exc
            except BotoCoreError as exc:
                raise TransportError(f"CloudWatch Logs not reachable for {self._group}: {exc}") from exc

    def _ensure_stream(self) -> None:
        if self._ready:
            return
        ensure_log_group(self._client, self._group)
        try:
            self._client.create_log_stream(logGroupName=self._group, logStreamName=self._stream)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
                raise
        self._ready = True

    def close(self) -> None:
        """The boto3 client belongs to the caller."""


def ensure_log_group(logs_client: Any, group: str, retention_days: int | None = None) -> None:
    """Create ``group`` if it is missing (raises botocore errors; callers decide how bad that is)."""
    try:
        logs_client.create_log_group(logGroupName=group)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
            raise
    if retention_days is not None:
        logs_client.put_retention_policy(logGroupName=group, retentionInDays=retention_days)


def _document_timestamp(document: str) -> int:
    try:
        return int(json.loads(document)["_aws"]["Timestamp"])
    except (ValueError, KeyError, TypeError) as exc:
        raise TransportError(f"not an EMF document (no _aws.Timestamp): {document[:120]!r}") from exc


def _batches(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    batches: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for event in events:
        event_size = len(str(event["message"]).encode("utf-8")) + EVENT_OVERHEAD_BYTES
        if current and (len(current) >= MAX_EVENTS_PER_PUT or size + event_size > MAX_BYTES_PER_PUT):
            batches.append(current)
            current, size = [], 0
        current.append(event)
        size += event_size
    if current:
        batches.append(current)
    return batches


def log_stream_name(worker_id: str) -> str:
    """The log stream of a worker: its id, without the ``:`` and ``*`` CloudWatch Logs refuses."""
    return worker_id.replace(":", "_").replace("*", "_")


def transport_from_settings(
    settings: Settings, worker_id: str, logs_client: Any | None = None
) -> MetricsTransport:
    """The transport ``metrics.destination`` names. ``agent`` and ``logs`` both write into
    ``settings.metrics_log_group`` (the group the stack creates and grants), one log stream per
    worker (:func:`log_stream_name`); ``logs`` needs ``logs_client`` (the composition root's,
    :mod:`consumer.runtime.clients`)."""
    destination = settings.metrics.destination
    if settings.metrics.backend == "otel":
        return NullTransport()  # OpenTelemetry only: no EMF documents go anywhere
    stream = log_stream_name(worker_id)
    if destination == "agent":
        return AgentTransport(
            settings.metrics.agent_endpoint, log_group=settings.metrics_log_group, log_stream=stream
        )
    if destination == "logs":
        if logs_client is None:
            raise ValueError("metrics.destination logs: the transport needs a CloudWatch Logs client")
        return CloudWatchLogsTransport(logs_client, settings.metrics_log_group, stream)
    if destination == "stdout":
        return StdoutTransport()
    return NullTransport()

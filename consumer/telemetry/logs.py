"""Logging: JSON lines with worker and shard id, shipped to two CloudWatch log groups by watchtower.

On stderr the same records are readable lines for a person at a terminal (``logs.console_format``:
``auto`` picks text on a terminal and JSON otherwise, so a redirected log stays machine-readable).

Routing (the lease worker's logs kept apart from the application's, as KCL operators advise):

* ``consumer.*`` except ``consumer.app`` -> ``settings.worker_log_group`` (leases, lifecycle, ...)
* ``consumer.app`` and every logger outside the package (user processors, libraries)
  -> ``settings.application_log_group``

Shipping never blocks record processing: a handler only appends to watchtower's per-stream queue,
which we keep bounded (oldest dropped and counted); PutLogEvents happens on watchtower's thread.
A failed delivery costs a WARN (rate-limited, to stderr only, so it cannot feed on itself) and a
counter. botocore, boto3, urllib3 and s3transfer stay at INFO or above: at DEBUG they log every
request, including the PutLogEvents that ship the logs (watchtower then hangs on its own output).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

import watchtower
from botocore.exceptions import BotoCoreError, ClientError

from consumer.telemetry.context import current_shard_id, current_worker_id, set_worker_id
from consumer.telemetry.health import TRANSPORT_LOGGER, TransportHealth
from consumer.telemetry.transports import ensure_log_group, log_stream_name
from ground.settings import Settings

APPLICATION_LOGGER = "consumer.app"
NOISY_LOGGERS = ("botocore", "boto3", "urllib3", "s3transfer")
MAX_QUEUED_EVENTS = 20_000

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is kept.
_STANDARD_ATTRIBUTES = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
    | {"message", "asctime", "worker_id", "shard_id", "taskName"}
)
_shipping = threading.local()


def is_worker_logger(name: str) -> bool:
    """True for the lease worker's own loggers (``consumer.*`` other than ``consumer.app``)."""
    in_package = name == "consumer" or name.startswith("consumer.")
    in_app = name == APPLICATION_LOGGER or name.startswith(APPLICATION_LOGGER + ".")
    return in_package and not in_app


class ContextFilter(logging.Filter):
    """Copies worker id and shard id from the context onto the record (never by hand)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "worker_id", None) is None:
            record.worker_id = current_worker_id()
        if getattr(record, "shard_id", None) is None:
            record.shard_id = current_shard_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message, worker_id, shard_id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "worker_id": getattr(record, "worker_id", None),
            "shard_id": getattr(record, "shard_id", None),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRIBUTES and key not in body:
                body[key] = value
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


class TextFormatter(logging.Formatter):
    """One readable line: time, level, logger, [worker shard], message, then ``key=value`` extras."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S.%f")[:-3]
        where = " ".join(
            str(value)
            for value in (getattr(record, "worker_id", None), getattr(record, "shard_id", None))
            if value
        )
        extras = " ".join(
            f"{key}={value}"
            for key, value in record.__dict__.items()
            if key not in _STANDARD_ATTRIBUTES and key != "message"
        )
        line = f"{stamp} {record.levelname:<7} {record.name}"
        line += f" [{where}]" if where else ""
        line += f" {record.getMessage()}" + (f" ({extras})" if extras else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def console_formatter(choice: str, console: TextIO) -> logging.Formatter:
    """The stderr formatter ``logs.console_format`` asks for (``auto``: text only on a terminal)."""
    interactive = choice == "auto" and hasattr(console, "isatty") and console.isatty()
    return TextFormatter() if choice == "text" or interactive else JsonFormatter()


class _RouteFilter(logging.Filter):
    def __init__(self, worker_side: bool) -> None:
        super().__init__()
        self._worker_side = worker_side

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == TRANSPORT_LOGGER or getattr(_shipping, "active", False):
            return False  # shipping trouble (and botocore's chatter while shipping) stays local
        return is_worker_logger(record.name) == self._worker_side


class ShippingHandler(watchtower.CloudWatchLogHandler):
    """watchtower's queueing and batching, with a bounded queue and counted, quiet failures."""

    FLUSH_TIMEOUT = 10

    def __init__(
        self, *, health: TransportHealth, max_queued: int = MAX_QUEUED_EVENTS, **kwargs: Any
    ) -> None:
        self._health = health
        self._max_queued = max_queued
        self._streams_ready: set[str] = set()
        super().__init__(**kwargs)

    @property
    def transport(self) -> str:
        return f"logs:{self.log_group_name}"

    def emit(self, message: logging.LogRecord) -> None:
        super().emit(message)  # type: ignore[no-untyped-call]
        for pending in list(self.queues.values()):
            dropped = 0
            while pending.qsize() > self._max_queued:
                try:
                    pending.get_nowait()
                    pending.task_done()
                    dropped += 1
                except Exception:
                    break
            if dropped:
                self._health.dropped(self.transport, dropped, "log queue full, oldest events dropped")

    def _submit_batch(self, batch: list[dict[str, Any]], log_stream_name: str, max_retries: int = 2) -> None:
        if not batch:
            return
        events = sorted(batch, key=lambda event: int(event["timestamp"]))
        error: BaseException | None = None
        _shipping.active = True
        try:
            for _ in range(max_retries):
                try:
                    self._ensure_stream(log_stream_name)
                    self.cwl_client.put_log_events(
                        logGroupName=self.log_group_name, logStreamName=log_stream_name, logEvents=events
                    )
                    return
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                        self._streams_ready.discard(log_stream_name)
                    error = exc
                except BotoCoreError as exc:
                    error = exc
        finally:
            _shipping.active = False
        self._health.send_failed(self.transport, error or "unknown error")
        self._health.dropped(self.transport, len(events), "PutLogEvents failed")

    def _ensure_stream(self, log_stream_name: str) -> None:
        if log_stream_name in self._streams_ready:
            return
        try:
            self.cwl_client.create_log_stream(logGroupName=self.log_group_name, logStreamName=log_stream_name)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "ResourceNotFoundException":
                ensure_log_group(self.cwl_client, self.log_group_name)
                self.cwl_client.create_log_stream(
                    logGroupName=self.log_group_name, logStreamName=log_stream_name
                )
            elif code != "ResourceAlreadyExistsException":
                raise
        self._streams_ready.add(log_stream_name)


@dataclass
class LoggingHandle:
    """What :func:`configure_logging` installed; ``close`` ships the last logs and removes it all."""

    handlers: list[logging.Handler]
    shipping: list[ShippingHandler]
    health: TransportHealth
    _previous_levels: dict[str, int] = field(default_factory=dict)
    _closed: bool = False

    def flush(self) -> None:
        for handler in self.handlers:
            handler.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        root = logging.getLogger()
        for handler in self.handlers:
            root.removeHandler(handler)  # first, so nothing logged while closing reaches a closed handler
        for handler in self.handlers:
            handler.flush()
            handler.close()
        for name, level in self._previous_levels.items():
            logging.getLogger(name).setLevel(level)


def _stream_name(worker_id: str) -> str:
    return log_stream_name(worker_id)


def configure_logging(
    settings: Settings,
    worker_id: str,
    logs_client: Any | None = None,
    *,
    console: TextIO | None = sys.stderr,
    health: TransportHealth | None = None,
    send_interval_seconds: float = 2.0,
) -> LoggingHandle:
    """Install the console and the two CloudWatch handlers on the root logger.

    ``logs_client`` (the composition root's, :mod:`consumer.runtime.clients`) is needed only when
    ``logs.ship_to_cloudwatch`` is true. Pass ``console=None`` for no stderr copy.
    """
    set_worker_id(worker_id)
    health = health or TransportHealth()
    root = logging.getLogger()
    level = logging.getLevelName(settings.logs.level)
    previous = {"": root.level, **{name: logging.getLogger(name).level for name in NOISY_LOGGERS}}
    root.setLevel(level)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.INFO, level))

    context = ContextFilter()
    formatter = JsonFormatter()
    handlers: list[logging.Handler] = []
    shipping: list[ShippingHandler] = []
    if console is not None:
        stream_handler = logging.StreamHandler(console)
        stream_handler.addFilter(context)
        stream_handler.setFormatter(console_formatter(settings.logs.console_format, console))
        handlers.append(stream_handler)
    if settings.logs.ship_to_cloudwatch:
        if logs_client is None:
            raise ValueError("logs.ship_to_cloudwatch: shipping needs a CloudWatch Logs client")
        client = logs_client
        for group, worker_side in (
            (settings.worker_log_group, True),
            (settings.application_log_group, False),
        ):
            try:
                ensure_log_group(client, group, settings.logs.retention_days)
            except (ClientError, BotoCoreError) as exc:
                health.send_failed(f"logs:{group}", f"cannot create log group (will retry on send): {exc}")
            handler = ShippingHandler(
                health=health,
                log_group_name=group,
                log_stream_name=_stream_name(worker_id),
                boto3_client=client,
                create_log_group=False,
                send_interval=send_interval_seconds,
            )
            handler.addFilter(_RouteFilter(worker_side))
            handler.addFilter(context)
            handler.setFormatter(formatter)
            handlers.append(handler)
            shipping.append(handler)
    for installed in handlers:
        root.addHandler(installed)
    return LoggingHandle(handlers, shipping, health, previous)

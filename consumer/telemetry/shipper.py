"""Ships items to a transport from a background thread, through a bounded queue.

The worker only ever appends to the queue (no I/O, no waiting). When the transport is down the
queue fills; beyond ``max_queued`` the oldest items are dropped and counted, so memory stays bounded
and the newest picture of the fleet survives. A failed send is retried after ``retry_millis``.

The thread and what it waits on come from the worker's :class:`~ground.threads.Threads`, so a
simulation ships its metrics on its own clock. Two events carry every wake-up: ``_work`` (something
was queued, or the shipper is closing) and ``_idle`` (nothing queued and nothing being sent).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence

from consumer.telemetry.errors import TransportError
from consumer.telemetry.health import TransportHealth
from consumer.telemetry.transports import MetricsTransport
from ground.threads import SYSTEM_THREADS, Running, Threads

log = logging.getLogger("consumer.telemetry.shipper")


class BackgroundShipper:
    """Non-blocking front of a :class:`MetricsTransport`: ``submit`` never waits and never raises."""

    def __init__(
        self,
        transport: MetricsTransport,
        health: TransportHealth,
        *,
        max_queued: int = 10_000,
        batch_size: int = 500,
        retry_millis: int = 1_000,
        threads: Threads = SYSTEM_THREADS,
    ) -> None:
        if max_queued < 1 or batch_size < 1:
            raise ValueError("max_queued and batch_size must be at least 1")
        self._transport = transport
        self._health = health
        self._max_queued = max_queued
        self._batch_size = batch_size
        self._retry_seconds = retry_millis / 1000
        self._threads = threads
        self._queue: deque[str] = deque()
        self._in_flight = 0
        self._lock = threading.Lock()  # guards the queue and the counters, never held across a send
        self._work = threads.event()
        self._idle = threads.event()
        self._idle.set()
        self._stopping = False
        self._deadline_reached = threads.event()
        self._thread: Running | None = None

    @property
    def transport(self) -> MetricsTransport:
        return self._transport

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = self._threads.start(f"telemetry-{self._transport.name}", self._run)

    def submit(self, items: Sequence[str]) -> None:
        if not items:
            return
        with self._lock:
            self._queue.extend(items)
            overflow = len(self._queue) - self._max_queued
            for _ in range(max(0, overflow)):
                self._queue.popleft()
            self._idle.clear()
        self._work.set()
        if overflow > 0:
            self._health.dropped(
                self._transport.name, overflow, f"queue full ({self._max_queued}), oldest dropped"
            )

    def queued(self) -> int:
        with self._lock:
            return len(self._queue) + self._in_flight

    def wait_idle(self, timeout_seconds: float) -> bool:
        """Wait until everything submitted so far was sent (or dropped); False on timeout."""
        deadline = time.monotonic() + timeout_seconds
        while not self._idle.wait(max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                return False
        return True

    def close(self, timeout_seconds: float = 5.0) -> None:
        """Send what is queued for at most ``timeout_seconds``, then drop (and count) the rest."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._work.set()
        if thread is None:
            self._drain_inline()
        else:
            thread.join(timeout_seconds)
            self._deadline_reached.set()
            self._work.set()
            thread.join(timeout_seconds)
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
        if left:
            self._health.dropped(self._transport.name, left, "still queued at shutdown")
        try:
            self._transport.close()
        except Exception as exc:  # a transport's close must not break shutdown
            log.debug("closing transport %s failed: %s", self._transport.name, exc)

    def _drain_inline(self) -> None:
        """Never started (tests, one-shot commands): one synchronous attempt."""
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
        if batch and not self._try_send(batch):
            self._health.dropped(self._transport.name, len(batch), "send failed at shutdown")
        self._idle.set()

    def _take(self) -> list[str] | None:
        """The next batch (marked in flight), [] to wait for more, None to end the thread."""
        with self._lock:
            if self._deadline_reached.is_set() or (not self._queue and self._stopping):
                return None
            if not self._queue:
                self._idle.set()
                self._work.clear()
                return []
            count = min(self._batch_size, len(self._queue))
            self._in_flight = count
            return [self._queue.popleft() for _ in range(count)]

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            if not batch:
                self._work.wait()
                continue
            sent = self._try_send(batch)
            with self._lock:
                self._in_flight = 0
                if not sent:
                    self._requeue(batch)
            if not sent:
                self._deadline_reached.wait(self._retry_seconds)

    def _requeue(self, batch: list[str]) -> None:
        """Put a failed batch back in front (called with the lock held); the bound still holds."""
        self._queue.extendleft(reversed(batch))
        overflow = len(self._queue) - self._max_queued
        for _ in range(max(0, overflow)):
            self._queue.popleft()
        if overflow > 0:
            self._health.dropped(self._transport.name, overflow, "queue full while the transport is down")

    def _try_send(self, batch: list[str]) -> bool:
        try:
            self._transport.send(batch)
        except TransportError as exc:
            self._health.send_failed(self._transport.name, exc)
            return False
        except Exception as exc:  # an unexpected transport bug must not kill the shipping thread
            self._health.send_failed(self._transport.name, repr(exc))
            return False
        return True

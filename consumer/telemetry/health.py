"""What a failing metrics or log transport costs: a WARN and a counter, never a stalled worker.

The WARN is rate-limited (one per transport per ``warn_every_millis``): a transport that is down
for an hour must not flood the very logs that may be shipping through it. Its logger,
``consumer.telemetry.transport``, is kept away from the CloudWatch log handlers (see
``logs.py``) so a failing log transport cannot feed on its own warnings.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from consumer.clock import Clock, SystemClock

TRANSPORT_LOGGER = "consumer.telemetry.transport"
log = logging.getLogger(TRANSPORT_LOGGER)


@dataclass(frozen=True)
class HealthSnapshot:
    dropped: int
    send_failures: int


class TransportHealth:
    """Thread-safe counters of dropped items and failed sends, shared by every transport."""

    def __init__(self, clock: Clock | None = None, warn_every_millis: int = 60_000) -> None:
        self._clock = clock or SystemClock()
        self._warn_every = warn_every_millis
        self._lock = threading.Lock()
        self._dropped = 0
        self._failures = 0
        self._last_warned: dict[str, int] = {}
        self._reported = HealthSnapshot(0, 0)

    def dropped(self, transport: str, count: int, reason: str) -> None:
        with self._lock:
            self._dropped += count
        self._warn(transport, f"{transport}: dropped {count} item(s): {reason}")

    def send_failed(self, transport: str, error: BaseException | str) -> None:
        with self._lock:
            self._failures += 1
        self._warn(transport, f"{transport}: send failed (will retry while the queue has room): {error}")

    def totals(self) -> HealthSnapshot:
        with self._lock:
            return HealthSnapshot(self._dropped, self._failures)

    def take_increments(self) -> HealthSnapshot:
        """What happened since the last call: the recorder publishes these as counters."""
        with self._lock:
            now = HealthSnapshot(self._dropped, self._failures)
            delta = HealthSnapshot(
                now.dropped - self._reported.dropped, now.send_failures - self._reported.send_failures
            )
            self._reported = now
            return delta

    def _warn(self, transport: str, message: str) -> None:
        now = self._clock.monotonic_millis()
        with self._lock:
            last = self._last_warned.get(transport)
            if last is not None and now - last < self._warn_every:
                return
            self._last_warned[transport] = now
        log.warning("telemetry transport trouble: %s", message, extra={"event": "TELEMETRY_TRANSPORT"})

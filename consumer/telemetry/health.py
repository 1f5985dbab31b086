"""What a failing metrics or log transport costs: a WARN and a counter, never a stalled worker.

The WARN is rate-limited (one per transport per ``warn_every_millis``): a transport that is down
for an hour must not flood the very logs that may be shipping through it. Its logger,
``consumer.telemetry.transport``, is kept away from the CloudWatch log handlers (see
``logs.py``) so a failing log transport cannot feed on its own warnings.

The worker's own health, as seen from outside the process, is here too: :class:`HeartbeatFile`
(``consumer run --heartbeat-file``), which an instance's bootstrap and watchdog read
(``deploy/health.py``).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from ground.clock import Clock, SystemClock
from ground.files import write_atomically

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


class HeartbeatFile:
    """A file rewritten as every lease-taking round begins and ends: its modification time is the
    loop's last sign of life, its content (JSON, wall milliseconds) ``{"at", "ok_at", "error"}`` --
    the last round whose reads succeeded and, while rounds fail, why.

    Read from outside the process (the instance's bootstrap before it signals CloudFormation, the
    watchdog afterwards, ``deploy/health.py``): a worker whose loop stops stops renewing it; one whose
    rounds fail because the leases or workers table refuses keeps renewing it and says so, which
    lets the watchdog tell its own failure from one the whole fleet shares. Written by replacing the
    file, so a reader never sees it half-written; a write that fails is logged once and never stops
    the worker.
    """

    def __init__(self, path: Path, clock: Clock | None = None) -> None:
        self.path = path
        self._clock = clock or SystemClock()
        self._warned = False
        self._ok_at: int | None = None
        self._error: str | None = None

    def record(self, ok: bool | None, error: str | None = None) -> None:
        """A round begins (``ok`` None) or ended: ``ok`` when its reads succeeded, else ``error`` says
        what failed. Written at the start too, so that a round riding out a throttled table with
        botocore's retries still shows a loop that runs."""
        now = self._clock.wall_millis()
        if ok:
            self._ok_at, self._error = now, None
        elif ok is False:
            self._error = (error or "round failed")[:500]
        content = {"at": now, "ok_at": self._ok_at, "error": self._error}
        try:
            # Not forced to disk: a heartbeat lost in a crash is one a dead worker should not have.
            write_atomically(self.path, json.dumps(content) + "\n", durable=False)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("cannot write the heartbeat file %s: %s", self.path, exc)

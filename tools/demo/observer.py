"""What both demos watch while the fleet runs: the demo's clock, the events read from the workers'
logs, the leases table, the live frame, and the drain and graceful stop that end the run.

The table demo (run.py) and the Kinesis demo (kinesis_run.py) differ in what they write and what
counts as delivered; everything they observe is the same, so it lives here once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.live import Live

from tools.dashboard.live import LiveDashboard
from tools.demo.events import FleetEvents, LogTail, in_time_order
from tools.demo.fleet import LocalFleet
from tools.demo.view import FleetSnapshot, lease_rows_from_items, render

# How long the fleet may take to deliver the rest once the load has stopped.
DRAIN_SECONDS = 180


def generations(shards: list[dict[str, Any]]) -> int:
    """The longest parent chain among the listed shards (1 for a stream that never rolled over)."""
    parents = {s["ShardId"]: s.get("ParentShardId") for s in shards}
    deepest = 0
    for shard_id in parents:
        depth, current = 0, shard_id
        while current in parents and depth <= len(parents):
            depth, current = depth + 1, parents[current]
        deepest = max(deepest, depth)
    return deepest


class Observer:
    """The demo's t+0, its events (notes and what the workers' logs say) and the fleet's picture."""

    def __init__(self, live: LiveDashboard | None = None) -> None:
        self.events = FleetEvents()
        self.live = live  # the live dashboard, whose time axis starts with the load
        self._tail = LogTail()
        self._started = time.monotonic()
        self.started_millis = time.time_ns() // 1_000_000

    def start_clock(self) -> None:
        """t+0: the load starts now (the events' "t+Ns" and the dashboard's axis count from here)."""
        self._started = time.monotonic()
        self.started_millis = time.time_ns() // 1_000_000
        if self.live is not None:
            self.live.start_millis = self.started_millis

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def note(self, text: str) -> None:
        self.events.events.append(f"t+{self.elapsed():.0f}s {text}")

    def read_logs(self, fleet: LocalFleet) -> None:
        stamp = f"t+{self.elapsed():.0f}s"
        for line in in_time_order(self._tail.read([w.log_path for w in fleet.workers.values()])):
            self.events.feed(line, stamp)

    def snapshot(
        self,
        fleet: LocalFleet,
        leases: Callable[[], list[dict[str, Any]]],
        *,
        writes: int,
        delivered: int,
        shards: list[dict[str, Any]],
        open_shards: int,
    ) -> FleetSnapshot:
        """The frame: the logs read so far, the leases table's items (``leases()``; a chaos fault or
        a busy endpoint shows none until the next frame), each worker's state, the counts, and the
        shards (``ShardId``/``ParentShardId`` each) of which ``open_shards`` have not ended."""
        self.read_logs(fleet)
        try:
            items = leases()
        except Exception:
            items = []
        elapsed = self.elapsed()
        states = {}
        for name, process in fleet.workers.items():
            if process.alive:
                states[name] = "paused" if process.paused else "running"
            else:
                states[name] = "killed" if process.stopped_how == "SIGKILL" else "stopped"
        return FleetSnapshot(
            elapsed_seconds=elapsed,
            leases=lease_rows_from_items(items),
            workers=states,
            writes=writes,
            delivered=delivered,
            writes_per_second=writes / max(elapsed, 1e-3),
            delivered_per_second=delivered / max(elapsed, 1e-3),
            lag_millis=None,
            open_shards=open_shards,
            closed_shards=len(shards) - open_shards,
            generations=generations(shards),
            events=tuple(self.events.events),
        )

    def drain_and_stop(
        self, live: Live, fleet: LocalFleet, snapshot: Callable[[], FleetSnapshot], writes: int
    ) -> None:
        """After the load: frames until every write is delivered (or DRAIN_SECONDS pass), then each
        live worker stopped gracefully (SIGTERM), and the last frame left on screen without its
        events, which follow it in full, once."""
        deadline = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < deadline:
            frame = snapshot()
            live.update(render(frame))
            if frame.delivered >= writes:
                break
            time.sleep(0.5)
        for process in fleet.alive():
            code = fleet.terminate(process.name)
            self.note(f"SIGTERM {process.name}: exited {code}")
        live.update(render(snapshot(), events=False))

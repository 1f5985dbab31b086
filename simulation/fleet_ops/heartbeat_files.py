"""The workers' heartbeat files, in memory: what each ``consumer run --heartbeat-file`` leaves for its
instance's watchdog to read.

A real file costs some 40 µs to read and 60 µs to write; a fleet history steps thousands of
watchdogs over hours of simulated time, each reading four files every 5 s. So the files are kept in
memory, as :class:`HeartbeatState`: what :class:`consumer.telemetry.health.HeartbeatFile` writes
(its ``record`` rules: the time of the last write, the last good round, the error while rounds
fail) and what :func:`deploy.health.read_heartbeat` makes of it at a given time. The real watchdog
reads them through :func:`standing_in`, which stands in for ``deploy.watchdog.heartbeats`` (the one
name ``Watchdog.step`` reads the files through) and ``deploy.health.heartbeats`` (the bootstrap's
``fresh_workers``) while a history runs.
tests/simulation/test_ops_stand_ins.py writes the same sequences with the real HeartbeatFile to real
files, reads them with the real ``deploy.health.heartbeats`` and requires the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import deploy.health
import deploy.watchdog
from deploy.health import Heartbeat
from deploy.plan import BootPlan, Layout

ERROR_LIMIT = 500  # HeartbeatFile keeps this much of an error


@dataclass
class HeartbeatState:
    """One heartbeat file: when it was last written (its mtime), its last good round, its error."""

    written: float | None = None
    ok_at: float | None = None
    error: str | None = None

    def record(self, now: float, ok: bool | None, error: str | None = None) -> None:
        """HeartbeatFile.record at ``now`` (wall seconds; the file holds milliseconds)."""
        millis = int(now * 1000)
        if ok:
            self.ok_at, self.error = millis / 1000, None
        elif ok is False:
            self.error = (error or "round failed")[:ERROR_LIMIT]
        self.written = now

    def read(self, now: float) -> Heartbeat:
        """deploy.health.read_heartbeat of the file at ``now``."""
        if self.written is None:
            return Heartbeat(None, None, None)
        ok_age = None if self.ok_at is None else max(0.0, now - self.ok_at)
        return Heartbeat(max(0.0, now - self.written), ok_age, self.ok_at, self.error)


@dataclass
class HealthDir:
    """One instance's heartbeat directory: a file per worker unit, by instance number ("1", "2", ...)."""

    files: dict[str, HeartbeatState] = field(default_factory=dict)

    def file(self, unit: str) -> HeartbeatState:
        return self.files.setdefault(unit, HeartbeatState())

    def beats(self, plan: BootPlan, now: float) -> dict[str, Heartbeat]:
        """deploy.health.heartbeats: every configured unit's file, missing ones as no file."""
        empty = HeartbeatState()
        return {str(i): self.files.get(str(i), empty).read(now) for i in range(1, plan.worker_processes + 1)}


@dataclass
class Filesystem:
    """The health directories of every simulated instance, by the layout root the watchdog is given."""

    dirs: dict[Path, HealthDir] = field(default_factory=dict)
    reads: int = 0

    def of(self, layout: Layout) -> HealthDir:
        return self.dirs.setdefault(layout.root, HealthDir())

    def heartbeats(self, plan: BootPlan, layout: Layout, now: float | None = None) -> dict[str, Heartbeat]:
        if now is None:
            raise RuntimeError("a simulated watchdog passes the time in")
        self.reads += 1
        return self.of(layout).beats(plan, now)


@contextmanager
def standing_in(files: Filesystem) -> Iterator[Filesystem]:
    """``deploy.watchdog.heartbeats`` (the watchdog's step) and ``deploy.health.heartbeats`` (the
    bootstrap's ``fresh_workers``) read ``files`` while the history runs."""
    modules = (deploy.watchdog, deploy.health)
    real: list[Callable[..., dict[str, Heartbeat]]] = [m.heartbeats for m in modules]
    for module in modules:
        setattr(module, "heartbeats", files.heartbeats)  # noqa: B010 (a module's name, on purpose)
    try:
        yield files
    finally:
        for module, function in zip(modules, real, strict=True):
            setattr(module, "heartbeats", function)  # noqa: B010

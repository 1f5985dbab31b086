"""Start, stop, kill and pause `consumer run` processes: the demo's fleet and the end-to-end tests'.

Each worker runs in its own process group so a kill reaches anything it started, writes its output
to its own log file, and is always reaped: :meth:`LocalFleet.close` (also called on context exit,
whatever happened) terminates what is still running, waits, and kills what did not stop in time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType


@dataclass
class ChildWorker:
    """One `consumer run` child process of the local fleet, and how it was stopped."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    paused: bool = False
    stopped_how: str | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class LocalFleet:
    """Worker processes for one environment; ``environ`` adds variables such as setting overrides."""

    env: str
    config_dir: Path
    log_dir: Path
    environ: Mapping[str, str] = field(default_factory=dict)
    workers: dict[str, ChildWorker] = field(default_factory=dict)
    _counter: int = 0

    def start_worker(self, extra_args: tuple[str, ...] = ()) -> ChildWorker:
        self._counter += 1
        name = f"worker-{self._counter}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        env = {**os.environ, **self.environ, "PYTHONUNBUFFERED": "1"}
        command = [
            sys.executable, "-m", "tools.cli", "run",
            "--env", self.env, "--config-dir", str(self.config_dir), "--worker-name", name, *extra_args,
        ]  # fmt: skip
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        process = ChildWorker(name, popen, log_path)
        self.workers[name] = process
        return process

    def _signal(self, name: str, sig: signal.Signals) -> None:
        process = self.workers[name]
        if process.alive:
            os.killpg(process.pid, sig)

    def kill(self, name: str) -> None:
        """SIGKILL: the worker dies without releasing anything (its leases must expire)."""
        self._signal(name, signal.SIGKILL)
        self.workers[name].stopped_how = "SIGKILL"
        self.workers[name].popen.wait(timeout=30)

    def terminate(self, name: str, timeout: float = 60.0) -> int:
        """SIGTERM: the worker drains, checkpoints and releases its leases, then exits."""
        self._signal(name, signal.SIGTERM)
        self.workers[name].stopped_how = "SIGTERM"
        try:
            return self.workers[name].popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal(name, signal.SIGKILL)
            self.workers[name].stopped_how = "SIGKILL (did not stop after SIGTERM)"
            return self.workers[name].popen.wait(timeout=30)

    def pause(self, name: str) -> None:
        """SIGSTOP: a frozen worker (a long GC pause, a stalled VM): it must fence itself on resume."""
        self._signal(name, signal.SIGSTOP)
        self.workers[name].paused = True

    def resume(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)
        self.workers[name].paused = False

    def alive(self) -> list[ChildWorker]:
        return [w for w in self.workers.values() if w.alive]

    def close(self, timeout: float = 30.0) -> None:
        for process in self.workers.values():
            if process.alive:
                if process.paused:
                    self.resume(process.name)
                self._signal(process.name, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.workers.values():
            remaining = max(0.1, deadline - time.monotonic())
            try:
                process.popen.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                self._signal(process.name, signal.SIGKILL)
                process.popen.wait(timeout=10)

    def __enter__(self) -> LocalFleet:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

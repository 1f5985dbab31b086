"""A ``consumer pipeline follow`` process as bench/lake_freshness.py runs two of them (the deployed
schedule's hand-over): its own interpreter and JVM, as the schedule's job has, each run timed from
its progress lines as they are printed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ENV = "bench"  # the follow processes' environment: <root>/config/bench.yaml


@dataclass
class FollowRun:
    """One run of a follow process, as its progress lines tell it."""

    started: float
    ended: float | None = None
    changes: int = 0
    items_rewritten: int = 0
    buckets_changed: int = 0
    lost_race: bool = False


class Follower:
    """A ``consumer pipeline follow`` process (its own interpreter and JVM, as the schedule's job
    has), with each of its runs timed from its progress lines as they are printed."""

    def __init__(self, root: Path, name: str, echo: bool) -> None:
        self.name = name
        self.echo = echo
        self.started = time.time()
        self.runs: list[FollowRun] = []
        self.lines: list[tuple[float, str]] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tools.cli", "pipeline", "follow", "--env", ENV],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "CONSUMER_CONFIG_DIR": str(root / "config")},
            cwd=Path(__file__).resolve().parent.parent,
        )
        self._reading = threading.Thread(target=self._read, name=f"follow-{name}", daemon=True)
        self._reading.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            at = time.time()
            self.lines.append((at, line))
            if self.echo:
                print(f"  [{self.name} {at - self.started:6.1f} s] {line.rstrip()}", flush=True)
            if line.startswith("[1/4]") and "0 object(s) to read" not in line:
                self.runs.append(FollowRun(at))
            elif not self.runs or self.runs[-1].ended is not None:
                continue
            elif match := re.match(
                r"\[2/4\] merging into (\d+) of \d+ bucket\(s\): items (\d+) rewritten", line
            ):
                self.runs[-1].buckets_changed = int(match[1])
                self.runs[-1].items_rewritten = int(match[2])
            elif match := re.match(r"\[3/4\] parsed \d+ line\(s\): (\d+) new change", line):
                self.runs[-1].changes = int(match[1])
            elif line.startswith("[4/4] committed"):
                self.runs[-1].ended = at
            elif line.startswith("[follow]") and "changed while" in line:
                self.runs[-1].ended, self.runs[-1].lost_race = at, True

    def committed(self) -> list[FollowRun]:
        return [r for r in self.runs if r.ended is not None and not r.lost_race]

    def caught_up(self, objects: int) -> bool:
        """Whether a run found nothing new with at least ``objects`` change-log objects merged: follow
        says so once per idle spell, "[follow] up to date (N object(s) merged)"."""
        for _, line in self.lines:
            match = re.match(r"\[follow\] up to date \((\d+) object\(s\) merged\)", line)
            if match and int(match[1]) >= objects:
                return True
        return False

    def tail(self) -> str:
        return "".join(line for _, line in self.lines[-40:])

    def stop(self) -> None:
        """SIGTERM: the run in progress finishes and commits (what ``--minutes`` does at its end)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reading.join(timeout=10)


def wait_for(done: Callable[[], bool], seconds: float, what: str, follower: Follower) -> None:
    deadline = time.time() + seconds
    while not done():
        if follower.process.poll() is not None:
            raise AssertionError(f"the {follower.name} follow ended waiting for {what}:\n{follower.tail()}")
        if time.time() > deadline:
            raise AssertionError(f"no {what} in {seconds:.0f} s:\n{follower.tail()}")
        time.sleep(0.5)

"""Deterministic simulated time for real threads: exactly one simulated thread runs at any moment.

The lease coordinator is real threaded code (a heartbeat thread, a taker thread, processing and
shard sync). To put it under a fault model where *calls take time* — a heartbeat that starts before a
fence and lands after it, a scan that returns while another worker takes — each simulated activity
runs in its own OS thread, but a baton passes between them: a thread runs until it sleeps on the
simulated clock (between rounds, or inside a store call's latency), then the kernel advances time to
the earliest wake-up and hands the baton to that thread. Ties are broken by a seeded draw, so a seed
replays one history exactly.

A *group* is one simulated process: pausing it (SIGSTOP, a VM suspend) holds every one of its threads
until it resumes — including one in the middle of a call, whose answer then arrives late (the request
itself, already sent, still reaches the server: :meth:`Kernel.sleep` ``through_pause``); crashing it
(SIGKILL) never runs them again.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


class SimExit(BaseException):
    """Raised inside a simulated thread when the simulation ends (not an Exception: nothing catches it)."""


@dataclass(eq=False)
class Group:
    name: str
    paused_until: int = 0
    crashed: bool = False


@dataclass(eq=False)
class Task:
    name: str
    group: Group
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    done: bool = False


class Kernel:
    def __init__(self, seed: int, start_millis: int = 1_000_000) -> None:
        self.now = start_millis
        self.rng = random.Random(seed)
        self._heap: list[tuple[int, float, int, Task, bool]] = []
        self._order = itertools.count()
        self._back = threading.Semaphore(0)
        self._current: Task | None = None
        self._tasks: list[Task] = []
        self._stopping = False
        self.errors: list[tuple[str, BaseException]] = []

    # ------------------------------------------------------------------ inside tasks

    @property
    def current(self) -> Task:
        if self._current is None:
            raise RuntimeError("not inside a simulated thread")
        return self._current

    def sleep(self, millis: float, *, through_pause: bool = False) -> None:
        """Give up the baton until ``millis`` of simulated time have passed and the group runs —
        or, ``through_pause``, even while it is paused: the server's side of a call sent before."""
        task = self.current
        self._push(self.now + max(0, int(millis)), task, through_pause)
        self._back.release()
        task.go.acquire()
        if self._stopping:
            raise SimExit

    # ------------------------------------------------------------------- from outside

    def spawn(self, name: str, group: Group, body: Callable[[], None], delay: int = 0) -> Task:
        task = Task(name, group)
        self._tasks.append(task)
        thread = threading.Thread(target=self._run, args=(task, body), name=f"sim-{name}", daemon=True)
        thread.start()
        self._push(self.now + delay, task)
        return task

    def _run(self, task: Task, body: Callable[[], None]) -> None:
        task.go.acquire()
        try:
            if not self._stopping:
                body()
        except SimExit:
            pass
        except BaseException as exc:  # a bug in the code under test: report it, do not hang
            self.errors.append((task.name, exc))
        finally:
            task.done = True
            self._back.release()

    def _push(self, wake: int, task: Task, through_pause: bool = False) -> None:
        heapq.heappush(self._heap, (wake, self.rng.random(), next(self._order), task, through_pause))

    def run_until(self, end: int, stop: Callable[[], bool] | None = None) -> None:
        """Run simulated threads in time order until ``end`` (or until ``stop()`` is true)."""
        while self._heap:
            if stop is not None and stop():
                return
            wake, _, _, task, through_pause = heapq.heappop(self._heap)
            if task.group.crashed:
                continue  # never runs again; shutdown() ends its thread
            if wake < task.group.paused_until and not through_pause:
                self._push(task.group.paused_until, task)
                continue
            if wake > end:
                self._push(wake, task, through_pause)
                break
            self.now = max(self.now, wake)
            self._current = task
            task.go.release()
            self._back.acquire()
            self._current = None
        self.now = max(self.now, end)

    def shutdown(self) -> None:
        """End every simulated thread (each raises SimExit where it waits)."""
        self._stopping = True
        for task in self._tasks:
            if not task.done:
                task.go.release()
                self._back.acquire()

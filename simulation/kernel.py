"""Deterministic simulated time for real threads: exactly one simulated thread runs at any moment.

The worker is real threaded code (a heartbeat thread, a taker thread, shard sync, the scheduler's
loop and its pool, each shard's lanes). To put it under a fault model where *calls take time* — a
heartbeat that starts before a fence and lands after it, a scan that returns while another worker
takes — each simulated activity runs in its own OS thread, but a baton passes between them: a thread
runs until it sleeps on the simulated clock (between rounds, inside a call's latency) or blocks on a
simulated event or lock (simulation/threads.py), then the kernel advances time to the
earliest wake-up and hands the baton to that thread. Ties are broken by a seeded draw, so a seed
replays one history exactly.

A *group* is one simulated process: pausing it (SIGSTOP, a VM suspend) holds every one of its threads
until it resumes — including one in the middle of a call, whose answer then arrives late (the request
itself, already sent, still reaches the server: :meth:`Kernel.sleep` ``through_pause``); crashing it
(SIGKILL) never runs them again.

A thread that waits is woken by the first of its wake-ups (a timeout, an event set, a lock
released); each wait gets a new *ticket* and heap entries carrying an older one are dropped, so a
thread is never woken twice for one wait. A thread that blocks on a real lock or event instead — a
port the product does not take from its threads — would stop the whole simulation: the kernel then
fails the history loudly, naming the thread, instead of hanging.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from time import monotonic

HANG_SECONDS = 120.0  # real time one baton hand-over may take before the history is declared hung
HANG_SLICE = 1.0  # the hand-over is awaited in slices of this many seconds; see Kernel._await_back


class SimExit(BaseException):
    """Raised inside a simulated thread when the simulation ends (not an Exception: nothing catches it)."""


class SimHangError(RuntimeError):
    """A simulated thread blocked outside the kernel (on a real lock or event): a port is missing."""


@dataclass(eq=False)
class Group:
    name: str
    paused_until: int = 0
    crashed: bool = False


def pause_millis(rng: random.Random, failover_millis: int) -> int:
    """How long a process stays stopped: mostly a GC pause or a short SIGSTOP (0.2-2.5 x failover),
    sometimes a suspended VM or a stopped process that comes back long after its leases were taken
    (2.5-8 x failover)."""
    factor = rng.uniform(0.2, 2.5) if rng.random() < 0.8 else rng.uniform(2.5, 8.0)
    return int(factor * failover_millis)


def _signal() -> threading.Lock:
    """A one-shot signal between two threads: a lock created held, released by the signaller and
    taken by the waiter. The baton changes hands thousands of times per history; a plain lock does
    it in C, about half the CPU of a ``threading.Semaphore`` (a Condition and a new lock per wait)."""
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass(eq=False)
class Task:
    name: str
    group: Group
    go: threading.Lock = field(default_factory=_signal)
    done: bool = False
    ticket: int = 0  # the current wait; wake-ups for an older one are stale


class Kernel:
    def __init__(self, seed: int, start_millis: int = 1_000_000) -> None:
        self.now = start_millis
        self.rng = random.Random(seed)
        self._heap: list[tuple[int, float, int, Task, int, bool]] = []
        self._order = itertools.count()
        self._back = _signal()
        self._current: Task | None = None
        self._tasks: list[Task] = []
        self._stopping = False
        self.errors: list[tuple[str, BaseException]] = []
        self.switches = 0

    # ------------------------------------------------------------------ inside tasks

    @property
    def current(self) -> Task:
        if self._current is None:
            if self._stopping:
                raise SimExit  # a thread unwinding at the end of the history: it ends here
            raise RuntimeError("not inside a simulated thread")
        return self._current

    @property
    def inside(self) -> bool:
        return self._current is not None

    def sleep(self, millis: float, *, through_pause: bool = False) -> None:
        """Give up the baton until ``millis`` of simulated time have passed and the group runs —
        or, ``through_pause``, even while it is paused: the server's side of a call sent before."""
        task = self.current
        task.ticket += 1
        self._push(self.now + max(0, int(millis)), task, task.ticket, through_pause)
        self._yield(task)

    def suspend(self, timeout_millis: float | None = None) -> None:
        """Give up the baton until the wait :meth:`prepare_wait` began is woken (:meth:`wake`) or
        ``timeout_millis`` have passed."""
        task = self.current
        if timeout_millis is not None:
            self._push(self.now + max(0, int(timeout_millis)), task, task.ticket, False)
        self._yield(task)

    def prepare_wait(self) -> tuple[Task, int]:
        """A new wait of the current thread: (the task, its ticket) for a waker to keep."""
        task = self.current
        task.ticket += 1
        return task, task.ticket

    def wake(self, task: Task, ticket: int) -> None:
        """End ``task``'s wait ``ticket`` now (no effect if it has moved on to another wait)."""
        if task.ticket == ticket and not task.done:
            self._push(self.now, task, ticket, False)

    def _yield(self, task: Task) -> None:
        if self._stopping:
            raise SimExit
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
        self._push(self.now + delay, task, task.ticket)
        return task

    def _run(self, task: Task, body: Callable[[], None]) -> None:
        task.go.acquire()
        try:
            if not self._stopping:
                body()
        except SimExit:
            pass
        except BaseException as exc:  # a bug in the code under test: report it, do not hang
            if not self._stopping:  # (once the history is over, threads only unwind)
                self.errors.append((task.name, exc))
        finally:
            task.done = True
            self._back.release()

    def _push(self, wake: int, task: Task, ticket: int, through_pause: bool = False) -> None:
        heapq.heappush(self._heap, (wake, self.rng.random(), next(self._order), task, ticket, through_pause))

    def run_until(self, end: int, stop: Callable[[], bool] | None = None) -> None:
        """Run simulated threads in time order until ``end`` (or until ``stop()`` is true)."""
        while self._heap:
            if stop is not None and stop():
                return
            wake, _, _, task, ticket, through_pause = heapq.heappop(self._heap)
            if task.done or ticket != task.ticket:
                continue  # finished, or woken already for this wait
            if task.group.crashed:
                continue  # never runs again; shutdown() ends its thread
            if wake < task.group.paused_until and not through_pause:
                self._push(task.group.paused_until, task, ticket)
                continue
            if wake > end:
                self._push(wake, task, ticket, through_pause)
                break
            self.now = max(self.now, wake)
            self._current = task
            self.switches += 1
            task.ticket += 1  # this wait is over: its other wake-ups are stale now
            task.go.release()
            if not self._await_back():
                raise SimHangError(f"simulated thread {task.name} blocked outside the kernel at {self.now}")
            self._current = None
        self.now = max(self.now, end)

    def _await_back(self) -> bool:
        """Wait for the running simulated thread to hand the baton back, for HANG_SECONDS of time in
        which this process could run. A slice that took far longer than asked means the process was
        stopped (SIGSTOP, a suspended job) or starved, not that the thread is stuck: it does not
        count, so a long form can be paused and resumed without its histories being declared hung."""
        waited = 0.0
        while waited < HANG_SECONDS:
            started = monotonic()
            if self._back.acquire(timeout=HANG_SLICE):
                return True
            if monotonic() - started < 3 * HANG_SLICE:
                waited += HANG_SLICE
        return False

    def shutdown(self) -> None:
        """End every simulated thread (each raises SimExit where it waits)."""
        self._stopping = True
        for task in self._tasks:
            if not task.done:
                task.go.release()
                self._back.acquire(timeout=HANG_SECONDS)

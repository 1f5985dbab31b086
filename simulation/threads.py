"""The worker's threads on the kernel: :class:`SimThreads` is the :class:`ground.threads.Threads` a
simulated worker is assembled with.

A pool's threads are simulated threads of the worker's process (its kernel group: paused and killed
with it); an event or a lock blocks the simulated thread that waits on it, not the OS thread, so the
kernel can hand the baton to whoever sets or releases it. The product's scheduler and lanes run on
these unchanged — ``submit``, ``Future.result``, ``Event.wait(timeout)``, ``with lock`` — which is
what lets one seed replay a whole worker, pool scheduling included.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from types import TracebackType
from typing import Any

from ground.threads import Event, Lock, Running
from simulation.kernel import Group, Kernel, SimExit, Task


class SimEvent:
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._flag = False
        self._waiters: list[tuple[Task, int]] = []

    def set(self) -> None:
        self._flag = True
        waiters, self._waiters = self._waiters, []
        for task, ticket in waiters:
            self._kernel.wake(task, ticket)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        self._waiters.append(self._kernel.prepare_wait())
        self._kernel.suspend(None if timeout is None else timeout * 1000)
        return self._flag


class SimLock:
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._locked = False
        self._waiters: deque[tuple[Task, int]] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        while self._locked:
            if not blocking:
                return False
            self._waiters.append(self._kernel.prepare_wait())
            self._kernel.suspend(None if timeout < 0 else timeout * 1000)
            if timeout >= 0 and self._locked:
                return False
        self._locked = True
        return True

    def release(self) -> None:
        if not self._locked:
            raise RuntimeError("release unlocked lock")
        self._locked = False
        if self._waiters:
            task, ticket = self._waiters.popleft()
            self._kernel.wake(task, ticket)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


class SimFuture(Future[Any]):
    """A future whose waiters wait on the kernel (the product calls ``result`` and ``exception``)."""

    def __init__(self, kernel: Kernel) -> None:
        super().__init__()
        self._settled = SimEvent(kernel)

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self._settled.set()

    def set_exception(self, exception: BaseException | None) -> None:
        super().set_exception(exception)
        self._settled.set()

    def _wait(self) -> None:
        while not self.done():
            self._settled.wait()

    def result(self, timeout: float | None = None) -> Any:
        self._wait()
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait()
        return super().exception(0)


class SimPool(Executor):
    """Up to ``max_workers`` simulated threads taking calls in order; each idle one waits on its own
    event, so a call wakes exactly one thread (or starts one, below the maximum)."""

    def __init__(self, kernel: Kernel, group: Group, max_workers: int, name: str) -> None:
        self._kernel, self._group, self._max, self._name = kernel, group, max_workers, name
        self._jobs: deque[tuple[SimFuture, Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = deque()
        self._idle: deque[SimEvent] = deque()
        self._workers = 0
        self._started = 0
        self._closed = False
        self._exited = SimEvent(kernel)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future = SimFuture(self._kernel)
        self._jobs.append((future, fn, args, kwargs))
        if self._idle:
            self._idle.popleft().set()
        elif self._workers < self._max:
            self._workers += 1
            self._started += 1
            self._kernel.spawn(f"{self._group.name}-{self._name}-{self._started}", self._group, self._work)
        return future

    def _work(self) -> None:
        try:
            while True:
                if self._jobs:
                    future, fn, args, kwargs = self._jobs.popleft()
                    try:
                        result = fn(*args, **kwargs)
                    except SimExit:
                        raise
                    except BaseException as exc:
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
                    continue
                if self._closed:
                    return
                ready = SimEvent(self._kernel)
                self._idle.append(ready)
                ready.wait()
        finally:
            self._workers -= 1
            if self._workers == 0:
                self._exited.set()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
        idle, self._idle = self._idle, deque()
        for ready in idle:
            ready.set()
        if wait and self._kernel.inside:
            while self._workers > 0:
                self._exited.clear()
                self._exited.wait()


class SimThreads:
    """One simulated process's threads (:class:`ground.threads.Threads`)."""

    def __init__(self, kernel: Kernel, group: Group) -> None:
        self._kernel, self._group = kernel, group

    def pool(self, max_workers: int, name: str) -> Executor:
        return SimPool(self._kernel, self._group, max_workers, name)

    def event(self) -> Event:
        return SimEvent(self._kernel)

    def lock(self) -> Lock:
        return SimLock(self._kernel)

    def start(self, name: str, target: Callable[[], None]) -> Running:
        running = SimRunning(self._kernel)

        def body() -> None:
            try:
                target()
            finally:
                running.finished()

        running.task = self._kernel.spawn(f"{self._group.name}-{name}", self._group, body)
        return running


class SimRunning:
    """A simulated thread started by :meth:`SimThreads.start`; joining waits on the kernel."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._done = SimEvent(kernel)
        self.task: Task | None = None

    def finished(self) -> None:
        if self._kernel.inside:  # not while the history's threads unwind at its end
            self._done.set()

    def join(self, timeout: float | None = None) -> None:
        if self.is_alive():
            self._done.wait(timeout)

    def is_alive(self) -> bool:
        return self.task is not None and not self.task.done

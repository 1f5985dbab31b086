"""Threads, passed in like time: the pools, events and locks a worker's parts run on come from a
:class:`Threads` they are given.

Every loop a worker runs -- the lease heartbeat and taker, shard sync's listing and children lookups,
the metrics timer and shipper, the scheduler (the caller's own thread) -- is started by
:meth:`Threads.start` and waits on its events; the scheduler steps shard consumers on a pool and
waits for the next one due on an event; per-key lanes run one shard's records on a pool of their own
and move the checkpoint under a lock held across the checkpoint write. In production those are the standard library's
(:data:`SYSTEM_THREADS`). A simulation that must replay a history exactly from its seed gives its
own, which run each pool thread as one of its simulated threads and block on its clock instead of
the operating system's (simulation/kernel.py): the product's code is the same, only who
runs the threads changes. Only what is held or waited on across a call to another port needs to
come from here; a lock that guards a few assignments stays a plain ``threading.Lock``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from types import TracebackType
from typing import Protocol


class Event(Protocol):
    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Lock(Protocol):
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> bool: ...

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None: ...


class Running(Protocol):
    """A thread started by :meth:`Threads.start`."""

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


class Threads(Protocol):
    def pool(self, max_workers: int, name: str) -> Executor:
        """A pool of ``max_workers`` threads whose names start with ``name``."""
        ...

    def event(self) -> Event: ...

    def lock(self) -> Lock: ...

    def start(self, name: str, target: Callable[[], None]) -> Running:
        """Run ``target`` on a thread of its own, named ``name``, that never keeps the process alive
        (a worker's loops: heartbeat, taker, shard sync, the metrics timer)."""
        ...


class SystemThreads:
    """The operating system's threads (``concurrent.futures`` and ``threading``)."""

    def pool(self, max_workers: int, name: str) -> Executor:
        return ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)

    def event(self) -> Event:
        return threading.Event()

    def lock(self) -> Lock:
        return threading.Lock()

    def start(self, name: str, target: Callable[[], None]) -> Running:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread


SYSTEM_THREADS: Threads = SystemThreads()

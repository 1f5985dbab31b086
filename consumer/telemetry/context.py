"""Worker id and shard id attached to every log line through context, not by hand at each call.

The shard id is a :class:`~contextvars.ContextVar`, so each shard's task sees its own value even
when many shards share a thread pool. The worker id is one value per process: threads started by
the pool do not inherit context variables, so it is kept as a process-wide default that a
context-local value may override (tests run several "workers" in one process).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_shard_id: ContextVar[str | None] = ContextVar("consumer_shard_id", default=None)
_worker_id_override: ContextVar[str | None] = ContextVar("consumer_worker_id", default=None)
_process_worker_id: str | None = None
_lock = threading.Lock()


def set_worker_id(worker_id: str) -> None:
    """Name this process's worker in every log line from now on (every thread)."""
    global _process_worker_id  # noqa: PLW0603 - one worker id per process, by design
    with _lock:
        _process_worker_id = worker_id


def current_worker_id() -> str | None:
    override = _worker_id_override.get()
    return override if override is not None else _process_worker_id


def current_shard_id() -> str | None:
    return _shard_id.get()


@contextmanager
def shard_context(shard_id: str | None) -> Iterator[None]:
    """Log lines inside the block carry ``shard_id``; the previous value comes back afterwards."""
    token = _shard_id.set(shard_id)
    try:
        yield
    finally:
        _shard_id.reset(token)


@contextmanager
def worker_context(worker_id: str) -> Iterator[None]:
    """Override the worker id in this context only (several simulated workers in one process)."""
    token = _worker_id_override.set(worker_id)
    try:
        yield
    finally:
        _worker_id_override.reset(token)

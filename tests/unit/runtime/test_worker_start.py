"""The order a worker starts its parts in (consumer.runtime.worker.Worker.run)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import pytest

from consumer.leases.memory import InMemoryLeaseStore
from consumer.processing.api import Batch, BatchResult
from consumer.runtime import worker as worker_module
from consumer.runtime.assembly import Ports
from consumer.runtime.worker import Worker
from consumer.streams.source import GetRecordsResult, Shard
from ground.settings import WorkerSettings


class NoShards:
    """A stream with no shards: the worker has nothing to process, only its start and stop."""

    def iterator_at(self, shard_id: str, position: str) -> str:
        raise AssertionError("no shard to read")

    def fetch(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        raise AssertionError("no shard to read")

    def most_records_per_read(self, shard_id: str) -> int:
        raise AssertionError("no shard to read")

    def list_shards(self) -> Iterable[Shard]:
        return ()

    def list_children(self, shard_id: str) -> Iterable[Shard]:
        return ()


def handle(batch: Batch) -> BatchResult | None:
    return None


def test_the_start_up_collection_runs_before_the_lease_threads_can_take_a_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gc.collect() over the start-up heap holds the interpreter; a lease taken while it ran waited
    for it before its shard consumer started (0.5-1.3 s of a paused shard in the rolling-deploy bench,
    for new workers that took leases in their first 0.6 s)."""
    threads_at_tuning: list[str] = []

    def tune() -> tuple[int, int, int]:
        threads_at_tuning.extend(thread.name for thread in threading.enumerate())
        return (700, 10, 10)

    monkeypatch.setattr(worker_module, "tune_for_long_running", tune)
    before = {thread.name for thread in threading.enumerate()}  # another test's, if any are left
    worker = Worker(WorkerSettings(), Ports(InMemoryLeaseStore(), NoShards(), lambda shard: handle))
    worker.request_stop()
    worker.run()
    assert threads_at_tuning, "the worker did not tune its collector"
    assert not [name for name in threads_at_tuning if name.startswith("lease-") and name not in before]

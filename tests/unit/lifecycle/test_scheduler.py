"""The scheduler runs many shard consumers on a few threads: lineage order, every record once,
graceful drain. Real threads and clock with short timers; assertions are on outcomes only."""

from __future__ import annotations

import threading
import time

from consumer.clock import SystemClock
from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.lifecycle.scheduler import Scheduler
from consumer.records import ShardInfo
from consumer.settings import WorkerSettings
from tests.unit.lifecycle.fakes import FakeStream, RecordingProcessor

FAST = WorkerSettings(
    failover_time_millis=3000,
    max_clock_skew_millis=100,
    idle_time_between_reads_millis=10,
    parent_shard_poll_interval_millis=100,
    max_records=50,
    max_worker_threads=4,
    task_backoff_time_millis=10,
)


def wait_for(condition, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def test_lineage_in_order_every_record_once_then_graceful_drain() -> None:
    store = InMemoryLeaseStore()
    stream = FakeStream()
    lineage = {"root": (), "mid": ("root",), "left": ("mid",), "right": ("mid",), "open": ()}
    for i, (shard, parents) in enumerate(lineage.items()):
        stream.add(shard, 1000 * (i + 1), 120, closed=shard != "open")
        store.create_if_absent(
            Lease(shard, None, 0, ExtendedSequenceNumber("TRIM_HORIZON"), parent_shard_ids=frozenset(parents))
        )
    order: list[str] = []
    processors: dict[str, RecordingProcessor] = {}
    lock = threading.Lock()

    def factory(shard: ShardInfo) -> RecordingProcessor:
        processor = RecordingProcessor()
        original = processor.process

        def process(records, behind, checkpointer, should_stop, lease_held=None):  # type: ignore[no-untyped-def]
            with lock:
                order.extend(shard.shard_id for _ in records)
            original(records, behind, checkpointer, should_stop, lease_held)

        processor.process = process  # type: ignore[method-assign]
        processors[shard.shard_id] = processor
        return processor

    coordinator = LeaseCoordinator(store, "w1", FAST, SystemClock())
    coordinator.start()
    scheduler = Scheduler(
        leases=coordinator, reader=stream, processor_factory=factory, settings=FAST, clock=SystemClock()
    )
    stop = threading.Event()
    runner = threading.Thread(target=scheduler.run, args=(stop,))
    runner.start()
    try:
        closed = [s for s in lineage if s != "open"]
        assert wait_for(lambda: all(store.get(s).finished for s in closed))
        assert wait_for(lambda: len(processors.get("open", RecordingProcessor()).seen) == 120)
    finally:
        stop.set()
        runner.join(timeout=30)
        coordinator.stop()
    assert not runner.is_alive()
    for shard in lineage:
        assert processors[shard].seen == [r.sequence_number for r in stream.shards[shard]], shard
    position = {shard: [i for i, s in enumerate(order) if s == shard] for shard in lineage}
    for child, parents in lineage.items():
        for parent in parents:
            assert min(position[child]) > max(position[parent]), f"{child} before {parent} finished"
    # The open shard was drained gracefully: checkpointed at its last record, lease released.
    open_lease = store.get("open")
    assert open_lease.owner is None
    assert open_lease.checkpoint == ExtendedSequenceNumber(stream.shards["open"][-1].sequence_number)
    assert processors["open"].events[-1] == "shutdown_requested"

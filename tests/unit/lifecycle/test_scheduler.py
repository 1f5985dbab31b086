"""The scheduler runs many shard consumers on a few threads: lineage order, every record once,
graceful drain. Real threads and clock with short timers; assertions are on outcomes only."""

from __future__ import annotations

import threading
import time

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.errors import LeaseStoreThrottledError, LeaseStoreUnavailableError
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.lifecycle.scheduler import Scheduler
from consumer.processing.api import ProcessRecordsInput
from consumer.records import ShardInfo
from consumer.streams.errors import StreamGoneError
from ground.clock import SystemClock
from ground.settings import WorkerSettings
from tests.unit.lifecycle.fakes import FakeStream, FlakyLeases, RecordingProcessor

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
        original = processor.process_records

        def process_records(process: ProcessRecordsInput) -> None:
            with lock:
                order.extend(shard.shard_id for _ in process.records)
            original(process)

        processor.process_records = process_records  # type: ignore[method-assign]
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


class Run:
    """``scheduler.run`` on a thread, keeping what it raised (a fatal error ends the worker)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._scheduler = scheduler
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._scheduler.run(self.stop, drain_millis=3000)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def lineage_rig(stream: FakeStream) -> tuple[InMemoryLeaseStore, LeaseCoordinator]:
    store = InMemoryLeaseStore()
    stream.add("parent", 1000, 30)
    stream.add("child", 5000, 30)
    for shard, parents in (("parent", ()), ("child", ("parent",))):
        store.create_if_absent(
            Lease(shard, None, 0, ExtendedSequenceNumber("TRIM_HORIZON"), parent_shard_ids=frozenset(parents))
        )
    coordinator = LeaseCoordinator(store, "w1", FAST, SystemClock())
    return store, coordinator


def test_throttled_parent_checks_and_checkpoints_do_not_stop_the_scheduler() -> None:
    stream = FakeStream()
    store, coordinator = lineage_rig(stream)
    leases = FlakyLeases(coordinator)
    leases.faults["waiting_parents"] = [LeaseStoreThrottledError("throttled")] * 3
    leases.faults["checkpoint"] = [
        LeaseStoreThrottledError("throttled"),
        LeaseStoreUnavailableError("503"),
    ] * 2
    processors: dict[str, RecordingProcessor] = {}

    def factory(shard: ShardInfo) -> RecordingProcessor:
        # Checkpoints only in shard_ended: the throttles hit the SHARD_END checkpoints (hand-overs).
        return processors.setdefault(shard.shard_id, RecordingProcessor(checkpoint_in_process=False))

    coordinator.start()
    scheduler = Scheduler(
        leases=leases, reader=stream, processor_factory=factory, settings=FAST, clock=SystemClock()
    )
    run = Run(scheduler)
    try:
        assert wait_for(lambda: store.get("child").finished or run.error is not None)
    finally:
        run.finish()
        coordinator.stop()
    assert run.error is None  # the old scheduler ended the worker on the first throttle
    assert leases.pending("waiting_parents") == 0 and leases.pending("checkpoint") == 0
    for shard in ("parent", "child"):
        assert processors[shard].seen == [r.sequence_number for r in stream.shards[shard]], shard


def test_a_processor_factory_that_raises_is_retried_for_that_shard_only() -> None:
    stream = FakeStream()
    store, coordinator = lineage_rig(stream)
    stream.add("other", 9000, 10)
    store.create_if_absent(Lease("other", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    failures = {"parent": 2}
    processors: dict[str, RecordingProcessor] = {}

    def factory(shard: ShardInfo) -> RecordingProcessor:
        if failures.get(shard.shard_id, 0) > 0:
            failures[shard.shard_id] -= 1
            raise ConnectionError(f"cannot build the processor for {shard.shard_id}")
        return processors.setdefault(shard.shard_id, RecordingProcessor())

    coordinator.start()
    scheduler = Scheduler(
        leases=coordinator, reader=stream, processor_factory=factory, settings=FAST, clock=SystemClock()
    )
    run = Run(scheduler)
    try:
        assert wait_for(lambda: store.get("child").finished or run.error is not None)
    finally:
        run.finish()
        coordinator.stop()
    assert run.error is None  # the old scheduler let the factory's error end the worker
    assert failures["parent"] == 0
    assert processors["parent"].seen == [r.sequence_number for r in stream.shards["parent"]]
    assert processors["other"].seen == [r.sequence_number for r in stream.shards["other"]]


def test_a_vanished_stream_still_ends_the_worker() -> None:
    stream = FakeStream()
    _, coordinator = lineage_rig(stream)
    stream.faults["parent"] = [StreamGoneError("the table was deleted")]
    coordinator.start()
    scheduler = Scheduler(
        leases=coordinator,
        reader=stream,
        processor_factory=lambda shard: RecordingProcessor(),
        settings=FAST,
        clock=SystemClock(),
    )
    run = Run(scheduler)
    try:
        assert wait_for(lambda: not run.thread.is_alive())
    finally:
        run.finish()
        coordinator.stop()
    assert isinstance(run.error, StreamGoneError)

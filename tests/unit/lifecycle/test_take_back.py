"""A worker that fences itself and takes its untouched lease back keeps the ownership, and with it
what its lanes had finished: nothing is handed to the handler twice (issue 35, "lanes replay after
a take-back").

With ``processing.parallelization_factor`` > 1 the checkpoint waits for the slowest lane, so lanes
finish records beyond it. The chaos demo (4 workers, a SIGSTOP every 1-2 s, factor 10) delivered 13
records twice with no change of owner: a worker paused past its fence took the same lease back 0.36 s
later and its new shard consumer started from the checkpoint, behind what the lanes had finished.
Both ways a take-back can meet the consumer are played here, on one shard, with the lanes run one
after another (inline threads) so the moment is exact: lane 0 finishes its records, then lane 1's
first record fails while the worker is stopped past its fence.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.lifecycle.scheduler import Scheduler
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.states import ShardState, ShutdownReason
from consumer.processing import Batch, function_processor
from consumer.processing.lanes import lane_of
from consumer.processing.retry import RetryPolicy
from consumer.records import ShardInfo
from ground.clock import FakeClock
from ground.settings import WorkerSettings
from ground.threads import Event, Lock
from tests.unit.lifecycle.fakes import FakeStream, record

SETTINGS = WorkerSettings(
    max_records=100,
    idle_time_between_reads_millis=200,
    failover_time_millis=10_000,
    max_clock_skew_millis=500,
)
LANES = 2


class InlineExecutor(Executor):
    """Runs each call as it is submitted: the lanes of a flush run one after another, in order."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


class InlineThreads:
    def pool(self, max_workers: int, name: str) -> Executor:
        return InlineExecutor()

    def event(self) -> Event:
        return threading.Event()

    def lock(self) -> Lock:
        return threading.Lock()


def keyed(lane: int, start: int) -> str:
    """A key whose records go to ``lane``."""
    return next(
        key
        for key in (f"k{i}" for i in range(start, start + 1000))
        if lane_of(record("s1", 1, key), LANES) == lane
    )


class Rig:
    """One worker on one open shard: its first record in lane 1, the next three in lane 0, more after."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store = InMemoryLeaseStore()
        self.store.create_if_absent(Lease("s1", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
        self.stream = FakeStream()
        slow, quick = keyed(1, 0), keyed(0, 0)
        keys = [slow, quick, quick, quick, slow] + [keyed(i % LANES, 100 * i) for i in range(2, 8)]
        self.stream.shards["s1"] = [record("s1", 100 + 10 * i, key) for i, key in enumerate(keys)]
        self.coordinator = LeaseCoordinator(self.store, "me", SETTINGS, self.clock)
        self.handled: list[str] = []
        self.stopped_once = False

    def handle(self, batch: Batch) -> None:
        first = batch.records[0]
        if int(first.sequence_number) == 100 and not self.stopped_once:
            # Lane 1's first record: the worker is stopped (SIGSTOP) past its fence mid-call.
            self.stopped_once = True
            self.clock.advance(SETTINGS.fence_after_millis + 1)
            raise RuntimeError("the downstream call timed out while the process was stopped")
        self.handled.extend(str(int(r.sequence_number)) for r in batch.records)

    def processor(self, shard: ShardInfo) -> Any:
        return function_processor(
            self.handle,
            clock=self.clock,
            policy=RetryPolicy(base_backoff_millis=10, max_backoff_millis=10),
            parallelization_factor=LANES,
            threads=InlineThreads(),
            batch_size=1,
        )

    def take_back(self) -> None:
        """The process runs again: a heartbeat lands, the taker re-adopts the untouched lease."""
        assert self.coordinator.heartbeat_once()
        self.coordinator.take_round()
        assert [lease.shard_id for lease in self.coordinator.held()] == ["s1"]

    def advance(self, millis: int) -> None:
        """Let time pass while the heartbeat thread keeps beating, as it does in a worker."""
        while millis > 0:
            step = min(millis, SETTINGS.renewal_interval_millis)
            self.clock.advance(step)
            self.coordinator.heartbeat_once()
            millis -= step

    def twice(self) -> list[str]:
        return sorted(seq for seq, n in Counter(self.handled).items() if n > 1)


def records_of(rig: Rig) -> list[str]:
    return [str(int(r.sequence_number)) for r in rig.stream.shards["s1"]]


def test_a_consumer_stopped_by_its_fence_hands_what_its_lanes_finished_to_the_one_after_the_take_back() -> (
    None
):
    rig = Rig()
    rig.coordinator.heartbeat_once()
    rig.coordinator.take_round()
    scheduler = Scheduler(
        leases=rig.coordinator,
        reader=rig.stream,
        processor_factory=rig.processor,
        settings=SETTINGS,
        clock=rig.clock,
        threads=InlineThreads(),
    )
    first: ShardConsumer | None = None
    for _ in range(20):  # until the fence stopped the first consumer
        scheduler.turn()
        first = first or scheduler.consumers().get("s1")
        if rig.stopped_once and "s1" not in scheduler.consumers():
            break
        rig.clock.advance(100)
    assert first is not None and first.life.reason is ShutdownReason.LEASE_LOST
    lane_0 = [str(int(r.sequence_number)) for r in rig.stream.shards["s1"] if lane_of(r, LANES) == 0]
    assert rig.handled == lane_0  # lane 0 ran ahead; the checkpoint waits for record 100 in lane 1
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")
    rig.take_back()
    for _ in range(40):
        scheduler.turn()
        rig.advance(100)
        if len(set(rig.handled)) == len(records_of(rig)):
            break
    assert sorted(set(rig.handled)) == sorted(records_of(rig))
    assert rig.twice() == [], "records a lane had finished were handed to the handler again"


def test_a_consumer_that_carries_on_after_the_take_back_does_not_run_its_lanes_finished_records_again() -> (
    None
):
    rig = Rig()
    rig.coordinator.heartbeat_once()
    rig.coordinator.take_round()
    lease = rig.coordinator.held()[0]
    consumer = ShardConsumer(
        ShardInfo("s1"),
        lease.checkpoint.sequence,
        leases=rig.coordinator,
        reader=rig.stream,
        processor=rig.processor(ShardInfo("s1")),
        settings=SETTINGS,
        clock=rig.clock,
        counter=lease.counter,
        threads=InlineThreads(),
    )
    while not rig.stopped_once:
        due = consumer.step()
        assert due is not None
        rig.clock.advance(max(0, due - rig.clock.monotonic_millis()))
    # The flush was interrupted by the fence and returned; the worker takes the lease back before
    # the consumer's next step looks (nothing told it the lease was lost: it goes on). The records
    # the flush did not finish wait in the processor's buffer for the next delivery: more come.
    rig.take_back()
    rig.stream.shards["s1"] += [record("s1", 300 + 10 * i, keyed(i % LANES, 5000)) for i in range(3)]
    for _ in range(40):
        due = consumer.step()
        assert due is not None and consumer.life.state is ShardState.PROCESSING
        rig.advance(max(0, due - rig.clock.monotonic_millis()))
        if len(set(rig.handled)) == len(records_of(rig)):
            break
    assert sorted(set(rig.handled)) == sorted(records_of(rig))
    assert rig.twice() == [], "records a lane had finished were handed to the handler again"


def test_the_next_consumer_of_a_held_lease_starts_after_a_checkpoint_the_table_refused() -> None:
    """A batch is handled and its checkpoint refused for now (the table unavailable: the function
    form defers it); the consumer is then stopped (the scheduler told it the lease was lost while the
    worker was frozen past its fence) and the worker keeps, or takes back, the same ownership. The
    next consumer must start after the records already handled, not from the table's checkpoint
    (found by the whole-worker simulator, seed 768 of its first sweep)."""
    rig = Rig()
    rig.stopped_once = True  # no fence inside the handler here
    rig.coordinator.heartbeat_once()
    rig.coordinator.take_round()
    processors = []

    def factory(shard: ShardInfo) -> Any:
        processor = function_processor(rig.handle, clock=rig.clock, threads=InlineThreads(), batch_size=100)
        processors.append(processor)
        return processor

    scheduler = Scheduler(
        leases=rig.coordinator,
        reader=rig.stream,
        processor_factory=factory,
        settings=SETTINGS,
        clock=rig.clock,
        threads=InlineThreads(),
    )
    first: ShardConsumer | None = None
    rig.store.unavailable = True  # every checkpoint refused for now
    for _ in range(20):
        scheduler.turn()
        first = first or scheduler.consumers().get("s1")
        if rig.handled:
            break
        rig.clock.advance(100)
    assert first is not None and rig.handled, "nothing was handled"
    rig.store.unavailable = False
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("TRIM_HORIZON")
    rig.stream.shards["s1"] += [record("s1", 300 + 10 * i, keyed(i % LANES, 5000)) for i in range(3)]
    first.lease_lost()  # as the scheduler does when a fence drops the lease
    for _ in range(40):
        scheduler.turn()
        rig.advance(100)
        if len(set(rig.handled)) == len(records_of(rig)) and len(processors) > 1:
            break
    assert len(processors) > 1, "no second consumer started"
    assert sorted(set(rig.handled)) == sorted(records_of(rig))
    assert rig.twice() == [], "records handled before the refused checkpoint were handled again"


def _started(rig: Rig) -> tuple[Scheduler, ShardConsumer]:
    """The rig's worker holding s1, its scheduler reconciled once: one consumer started, not told."""
    rig.stopped_once = True  # no fence inside the handler here
    rig.coordinator.heartbeat_once()
    rig.coordinator.take_round()
    scheduler = Scheduler(
        leases=rig.coordinator,
        reader=rig.stream,
        processor_factory=rig.processor,
        settings=SETTINGS,
        clock=rig.clock,
        threads=InlineThreads(),
    )
    scheduler.reconcile()
    consumer = scheduler.consumers()["s1"]
    assert not consumer.lease_lost_signalled
    return scheduler, consumer


def test_the_scheduler_tells_a_consumer_its_lease_is_lost_as_soon_as_the_fence_drops_it() -> None:
    """The fence is the worker's own promise to stop before another can take over: once it passes
    (the process was stopped, no heartbeat landed), the next reconcile tells the consumer, before any
    step of it and before the worker could take the lease back. This is what makes the lanes' own
    buffer guard (a consumer carrying on after a take-back) a second line rather than the only one."""
    rig = Rig()
    scheduler, consumer = _started(rig)
    rig.clock.advance(SETTINGS.fence_after_millis + 1)
    assert not rig.coordinator.may_process("s1")
    scheduler.reconcile()
    assert consumer.lease_lost_signalled, "the fence dropped the lease and the consumer was not told"

"""Stalls (issue 46: "a hung processor looks healthy"): a shard whose lease is held, whose work waits
and whose checkpoint does not move for worker.stall_timeout_millis is released, loudly, so another
worker takes it. The rule (StallWatch) is pure and tested on observations; the scheduler's part is
shown with real threads: a processor that hangs forever on one shard, the others untouched."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.lifecycle.scheduler import Scheduler
from consumer.lifecycle.stalls import Observed, StallWatch
from consumer.processing.api import ProcessRecordsInput
from consumer.records import ShardInfo
from ground.clock import SystemClock
from tests.unit.lifecycle.fakes import FakeStream, RecordingProcessor
from tests.unit.lifecycle.test_scheduler import FAST, wait_for

TIMEOUT = 10_000


def _look(watch: StallWatch, now: int, **item: object) -> list[str]:
    values: dict[str, object] = {
        "shard_id": "s",
        "step_started": None,
        "checkpoint": "100",
        "ended_unfinished": False,
    }
    values.update(item)
    return [f"{s.shard_id}:{s.kind}" for s in watch.look(now, [Observed(**values)])]  # type: ignore[arg-type]


def test_a_call_that_does_not_return_while_the_checkpoint_stands_is_a_stall() -> None:
    watch = StallWatch(TIMEOUT)
    assert _look(watch, 0, step_started=0) == []
    assert _look(watch, TIMEOUT - 1, step_started=0) == []
    assert _look(watch, TIMEOUT, step_started=0) == ["s:call"]


def test_a_slow_processor_that_moves_its_checkpoint_never_stalls() -> None:
    watch = StallWatch(TIMEOUT)
    for i in range(10):
        # every step runs for most of the timeout, and each moves the checkpoint
        assert _look(watch, i * (TIMEOUT - 1), step_started=i * (TIMEOUT - 1), checkpoint=str(100 + i)) == []


def test_a_quiet_open_shard_never_stalls() -> None:
    watch = StallWatch(TIMEOUT)
    assert _look(watch, 0) == []
    assert _look(watch, 100 * TIMEOUT) == []  # no call running, not ended: nothing waits


def test_an_ended_shard_whose_reading_never_reaches_the_end_stalls_a_timeout_after_its_end_was_seen() -> None:
    watch = StallWatch(TIMEOUT)
    assert _look(watch, 0) == []
    # checkpoint unchanged for long before the end became known: the clock starts at the end
    assert _look(watch, 5 * TIMEOUT, ended_unfinished=True) == []
    assert _look(watch, 6 * TIMEOUT - 1, ended_unfinished=True) == []
    assert _look(watch, 6 * TIMEOUT, ended_unfinished=True) == ["s:end"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=3 * TIMEOUT),  # time passing
            st.booleans(),  # a step is running
            st.booleans(),  # the checkpoint moved
            st.booleans(),  # the shard is known ended
        ),
        max_size=30,
    )
)
def test_a_stall_is_only_ever_reported_after_a_timeout_without_progress(
    steps: list[tuple[int, bool, bool, bool]],
) -> None:
    watch = StallWatch(TIMEOUT)
    now, checkpoint, moved_at, running_since, ended_at = 0, 0, 0, None, None
    for passed, running, moved, ended in steps:
        now += passed
        if moved:
            checkpoint, moved_at = checkpoint + 1, now
        running_since = (running_since if running_since is not None else now) if running else None
        ended_at = (ended_at if ended_at is not None else now) if ended else None
        item = Observed("s", running_since, str(checkpoint), ended)
        for stall in watch.look(now, [item]):
            assert now - moved_at >= TIMEOUT
            if stall.kind == "call":
                assert running_since is not None and now - running_since >= TIMEOUT
            else:
                assert ended_at is not None and now - ended_at >= TIMEOUT


def test_a_processor_that_hangs_forever_on_one_shard_is_moved_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two workers; w1 holds both shards at first. Its processor hangs on `stuck` (a downstream call
    without a timeout): past the stall timeout w1 logs the hanging call's stack, releases the lease
    and w2 takes the shard and delivers it; w1's other shard never stops."""
    settings = FAST.model_copy(update={"stall_timeout_millis": 1_500})
    store = InMemoryLeaseStore()
    stream = FakeStream()
    for i, shard in enumerate(("stuck", "fine")):
        stream.add(shard, 1000 * (i + 1), 40, closed=False)
        store.create_if_absent(Lease(shard, None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    hang = threading.Event()
    seen: dict[tuple[str, str], int] = {}
    lock = threading.Lock()

    def factory_of(worker: str):  # type: ignore[no-untyped-def]
        def factory(shard: ShardInfo) -> RecordingProcessor:
            processor = RecordingProcessor()
            original = processor.process_records

            def process_records(process: ProcessRecordsInput) -> None:
                if worker == "w1" and shard.shard_id == "stuck":
                    hang.wait()  # the hanging downstream call
                with lock:
                    seen[(worker, shard.shard_id)] = seen.get((worker, shard.shard_id), 0) + len(
                        process.records
                    )
                original(process)

            processor.process_records = process_records  # type: ignore[method-assign]
            return processor

        return factory

    clock = SystemClock()
    first = LeaseCoordinator(store, "w1", settings, clock)
    first.start()
    runners, stops, coordinators = [], [], [first]

    def run(coordinator: LeaseCoordinator, worker: str) -> None:
        scheduler = Scheduler(
            leases=coordinator,
            reader=stream,
            processor_factory=factory_of(worker),
            settings=settings,
            clock=clock,
        )
        stop = threading.Event()
        thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
        thread.start()
        runners.append(thread)
        stops.append(stop)

    caplog.set_level(logging.ERROR, logger="consumer.lifecycle")
    try:
        run(first, "w1")
        assert wait_for(lambda: len(first.held()) == 2)
        second = LeaseCoordinator(store, "w2", settings, clock)
        coordinators.append(second)
        second.start()
        run(second, "w2")
        assert wait_for(lambda: seen.get(("w2", "stuck"), 0) == 40, timeout=30)
        assert seen.get(("w1", "fine"), 0) + seen.get(("w2", "fine"), 0) >= 40
        stalled = [r for r in caplog.records if "SHARD_STALLED" in r.getMessage()]
        assert stalled, "no stall was logged"
        message = stalled[0].getMessage()
        assert "Shard stuck stalled" in message and "hang.wait()" in message, message
        # A graceful stop with a call that never returned: the scheduler does not wait for it.
        stops[0].set()
        runners[0].join(timeout=10)
        assert not runners[0].is_alive(), "the stop waited for the stuck call"
    finally:
        for stop in stops:
            stop.set()
        for thread in runners:
            thread.join(timeout=10)
        hang.set()
        for coordinator in coordinators:
            coordinator.stop()


def test_a_shard_that_hangs_in_every_worker_costs_each_worker_one_thread_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The processor hangs on `stuck` in whichever worker runs it, forever; each worker has one
    thread for steps. A worker never takes `stuck` back while its call there is stuck (it would
    hang a second thread), and the call left behind does not take the thread the worker's other
    shards need: they are delivered and never found stalled. Once both workers have a call stuck
    on it, neither takes `stuck` again (the deployed fleet's model: a shard that hung in every worker
    leaked a thread per move until every worker's pool was full and all its shards stalled)."""
    settings = FAST.model_copy(update={"stall_timeout_millis": 1_000, "max_worker_threads": 1})
    store = InMemoryLeaseStore()
    stream = FakeStream()
    shards = ("stuck", "fine-1", "fine-2", "fine-3")
    for i, shard in enumerate(shards):
        stream.add(shard, 1000 * (i + 1), 30, closed=False)
        store.create_if_absent(Lease(shard, None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    hang = threading.Event()
    hangs: list[str] = []
    seen: dict[str, set[str]] = {}
    lock = threading.Lock()

    def factory_of(worker: str):  # type: ignore[no-untyped-def]
        def factory(shard: ShardInfo) -> RecordingProcessor:
            processor = RecordingProcessor()

            def process_records(process: ProcessRecordsInput) -> None:
                if shard.shard_id == "stuck":
                    with lock:
                        hangs.append(worker)
                    hang.wait()
                with lock:
                    seen.setdefault(shard.shard_id, set()).update(r.sequence_number for r in process.records)

            processor.process_records = process_records  # type: ignore[method-assign]
            return processor

        return factory

    clock = SystemClock()
    coordinators = [LeaseCoordinator(store, name, settings, clock) for name in ("w1", "w2")]
    stops, runners = [], []
    caplog.set_level(logging.ERROR, logger="consumer.lifecycle")
    try:
        for coordinator, name in zip(coordinators, ("w1", "w2"), strict=True):
            coordinator.start()
            scheduler = Scheduler(
                leases=coordinator,
                reader=stream,
                processor_factory=factory_of(name),
                settings=settings,
                clock=clock,
            )
            stop = threading.Event()
            runner = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
            runner.start()
            stops.append(stop)
            runners.append(runner)
        assert wait_for(lambda: bool(hangs), timeout=30)
        fine = [s for s in shards if s != "stuck"]
        assert wait_for(lambda: all(len(seen.get(s, ())) == 30 for s in fine), timeout=30), {
            s: len(seen.get(s, ())) for s in fine
        }
        time.sleep(8 * settings.stall_timeout_millis / 1000)  # long past any worker's avoidance of it
        assert len(hangs) == len(set(hangs)), (
            f"a worker took the shard back while its call was stuck: {hangs}"
        )
        stalled = [r.getMessage() for r in caplog.records if "SHARD_STALLED" in r.getMessage()]
        assert stalled and all("Shard stuck stalled" in m for m in stalled), stalled
    finally:
        for stop in stops:
            stop.set()
        for runner in runners:
            runner.join(timeout=10)
        hang.set()
        for coordinator in coordinators:
            coordinator.stop()


def test_a_hand_over_request_wakes_an_idle_consumer_before_its_back_off_ends() -> None:
    """A quiet shard's consumer backs off between empty reads up to max_idle_time_between_reads
    (10 s by default), longer than a hand-over's deadline (failover - margin: 8 s). Asked for, it must
    hand the lease over at once, not at its next read (issue 46: hand-overs ran overdue)."""
    from consumer.leases.model import HandOverRequest

    settings = FAST.model_copy(
        update={"idle_time_between_reads_millis": 10_000, "max_idle_time_between_reads_millis": 10_000}
    )
    store = InMemoryLeaseStore()
    stream = FakeStream()
    stream.add("quiet", 1000, 0, closed=False)
    store.create_if_absent(Lease("quiet", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    clock = SystemClock()
    owner = LeaseCoordinator(store, "owner", settings, clock)
    owner.start()
    thief = LeaseCoordinator(store, "thief", settings, clock)
    thief.heartbeat_once()
    scheduler = Scheduler(
        leases=owner,
        reader=stream,
        processor_factory=lambda _shard: RecordingProcessor(),
        settings=settings,
        clock=clock,
    )
    stop = threading.Event()
    runner = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    runner.start()
    try:
        assert wait_for(lambda: "quiet" in scheduler.consumers())
        wait_for(lambda: False, timeout=0.5)  # the consumer's first empty read: it backs off 10 s
        store.ask_hand_over("owner", HandOverRequest("quiet", "thief", clock.wall_millis()))
        asked = time.monotonic()
        owner.heartbeat_once()  # brings the request, as the heartbeat loop would
        assert wait_for(lambda: store.get("quiet").owner == "thief", timeout=8), "not handed over"
        assert time.monotonic() - asked < 5, "handed over only after the idle back-off"
    finally:
        stop.set()
        runner.join(timeout=10)
        owner.stop()


def test_a_stalled_call_that_never_returns_is_counted_again_every_stall_timeout() -> None:
    """A shard given up while its call was stuck may end free and avoided by every worker it hung in:
    nothing finds it stalled again, so the worker keeps counting it in StalledShards every stall
    timeout until the call returns, and the stalled-shards alarm stays in ALARM (it went quiet after
    the first burst of moves in the deployed fleet's model)."""
    from types import SimpleNamespace
    from typing import Any

    from consumer.lifecycle.stall_mover import StallMover
    from ground.clock import FakeClock
    from ground.threads import SYSTEM_THREADS

    counted: list[tuple[Any, ...]] = []
    given_up: list[str] = []
    leases = SimpleNamespace(
        give_up_stalled=lambda shard, counter=None: given_up.append(shard),
        shards_with_children=frozenset,
    )
    metrics = SimpleNamespace(count=lambda *args, **kwargs: counted.append((*args, kwargs.get("shard_id"))))
    clock = FakeClock()
    mover = StallMover(
        leases=leases,  # type: ignore[arg-type]
        settings=FAST.model_copy(update={"stall_timeout_millis": 10_000}),
        clock=clock,
        metrics=metrics,  # type: ignore[arg-type]
        threads=SYSTEM_THREADS,
    )
    mover.move(SimpleNamespace(shard_id="s1", counter=3, lease_lost=lambda: None), stuck=True)  # type: ignore[arg-type]
    # Given up, and stuck as the lease side sees it when it asks (the mover alone keeps the count).
    assert given_up == ["s1"] and mover.stuck() == {"s1"} and len(counted) == 1
    for _ in range(35):  # 35 s of looks, one a second
        clock.advance(1_000)
        mover.due({}, {})
    assert counted == [("ProcessTask", "StalledShards", 1, "s1")] * 4  # the move, then at 10, 20, 30 s
    mover.returned("s1")
    assert mover.stuck() == frozenset()  # the lease side may take it back after its stall timeout
    for _ in range(25):
        clock.advance(1_000)
        mover.due({}, {})
    assert len(counted) == 4  # the call returned: no longer counted

"""The processing layer's processors driven by the real shard consumer (fake stream, in-memory leases):
the lifecycle calls the class form directly, with no adapter between them."""

from __future__ import annotations

import random
from pathlib import Path

from consumer.processing import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
    function_processor,
)
from consumer.processing.dead_letter import LocalDeadLetter
from consumer.processing.retry import RetryPolicy
from consumer.records import StreamRecord
from ground.settings import WorkerSettings
from tests.unit.lifecycle.test_shard_consumer import Rig
from tests.unit.processing.helpers import ScriptedHandler


def test_a_closed_shard_with_a_poison_record_and_flaky_calls_ends_at_shard_end(tmp_path: Path) -> None:
    rig = Rig(WorkerSettings(max_records=7, idle_time_between_reads_millis=200))
    rig.stream.add("s1", 100, 30)  # sequence numbers 100, 110, ..., 390; closed
    rig.lease("s1")
    handler = ScriptedHandler(every=4, poison={250})
    dead = LocalDeadLetter(tmp_path)
    processor = function_processor(
        handler,
        clock=rig.clock,
        policy=RetryPolicy(
            max_retry_attempts=2, base_backoff_millis=5, max_backoff_millis=20, rng=random.Random(1)
        ),
        dead_letter=dead,
    )
    consumer = rig.consumer("s1", processor)
    rig.drive(consumer)
    everything = [100 + 10 * i for i in range(30)]
    first_seen: dict[int, int] = {}
    for index, seq in enumerate(handler.succeeded):
        first_seen.setdefault(seq, index)
    assert sorted(first_seen) == [s for s in everything if s != 250]
    assert sorted(first_seen, key=first_seen.__getitem__) == sorted(first_seen)  # in order
    (document,) = dead.read_all()
    assert [int(r["dynamodb"]["SequenceNumber"]) for r in document["records"]] == [250]
    assert consumer.checkpointer.last_checkpoint == "SHARD_END"


def test_a_stuck_record_gives_control_back_when_the_worker_must_stop_without_checkpointing_past_it() -> None:
    rig = Rig(WorkerSettings(max_records=5, idle_time_between_reads_millis=200))
    rig.stream.add("s2", 100, 5, closed=False)
    rig.lease("s2")
    handler = ScriptedHandler(poison={120})
    processor = function_processor(handler, clock=rig.clock, policy=RetryPolicy(base_backoff_millis=5))
    consumer = rig.consumer("s2", processor)
    for _ in range(3):
        due = consumer.step()
        assert due is not None
        if handler.calls:
            break
    consumer.request_shutdown()  # (the retry loop already returned: fenced while it backed off)
    rig.drive(consumer)
    assert handler.succeeded == [100, 110]
    assert consumer.checkpointer.last_checkpoint == str(110).zfill(21)


class StrictClassForm:
    """A class-form processor that, like most user code, sets its state up in ``initialize``."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def initialize(self, initialization: InitializationInput) -> None:
        self.calls.append("initialize")
        self.sink: list[StreamRecord] = []

    def process_records(self, process: ProcessRecordsInput) -> None:
        self.sink.extend(process.records)

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        self.calls.append("lease_lost")
        self.sink.clear()  # AttributeError when never initialized

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        self.calls.append("shard_ended")
        shard_ended.checkpointer.checkpoint_shard_end()

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        self.calls.append("shutdown_requested")
        if self.sink:  # AttributeError when never initialized
            shutdown.checkpointer.checkpoint()


def test_a_class_form_processor_stopped_before_its_parents_finished_is_never_called() -> None:
    rig = Rig(WorkerSettings(max_records=5, idle_time_between_reads_millis=200))
    rig.stream.add("parent", 100, 5)
    rig.stream.add("child", 1000, 5)
    rig.lease("parent")
    rig.lease("child", parents=("parent",))
    user = StrictClassForm()
    child = rig.consumer("child", user, ("parent",))
    assert child.step() is not None  # waiting on its parent
    child.request_shutdown()
    rig.drive(child)
    assert user.calls == []
    assert rig.store.get("child").owner is None

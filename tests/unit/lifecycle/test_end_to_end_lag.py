"""``EndToEndLag``: a record's creation time -> the moment it was handled, recorded once per handled
call of the function form (by its runner, when records are finished, which may be long after they
were read: retries, a parked key) and once per returned batch of the class form (by the shard
consumer); a function form behind the several-stream wrapper is not counted twice."""

from __future__ import annotations

import random

from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.processing.api import Batch, BatchResult, RecordProcessor
from consumer.processing.factory import function_processor
from consumer.processing.retry import RetryPolicy
from consumer.records import ShardInfo
from consumer.runtime.several_streams import OwnShardIds
from tests.unit.lifecycle.fakes import RecordingProcessor
from tests.unit.lifecycle.test_shard_consumer import Rig

CREATED_MILLIS = 1_700_000_000_000  # the fakes' records' creation time; the FakeClock starts there


class Lags:
    """The metrics port, keeping every EndToEndLag recorded."""

    def __init__(self) -> None:
        self.lags: list[tuple[float, str | None]] = []

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        del operation, name, value, unit, shard_id

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        if name == "EndToEndLag":
            assert (operation, unit) == ("ProcessTask", "Milliseconds")
            self.lags.append((value, shard_id))

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        del operation, name_prefix, millis, success


def consumer(rig: Rig, processor: RecordProcessor, metrics: Lags) -> ShardConsumer:
    rig.coordinator.take_round()
    lease = next(lease for lease in rig.coordinator.held() if lease.shard_id == "s1")
    return ShardConsumer(
        ShardInfo("s1"),
        lease.checkpoint.sequence,
        leases=rig.coordinator,
        reader=rig.stream,
        processor=processor,
        settings=rig.settings,
        clock=rig.clock,
        metrics=metrics,
        counter=lease.counter,
    )


def test_the_class_form_records_the_lag_of_each_batch_it_returned_from() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 3)
    rig.lease("s1")
    rig.clock.advance(4_000)  # read 4 s after the records were written
    metrics = Lags()
    rig.drive(consumer(rig, RecordingProcessor(), metrics))
    assert metrics.lags and metrics.lags[0] == (4_000.0, "s1")


def test_the_function_form_records_it_when_a_record_is_handled_at_last_not_when_read() -> None:
    rig = Rig()
    rig.stream.add("s1", 100, 2)
    rig.lease("s1")
    calls: list[int] = []

    def handler(batch: Batch) -> BatchResult | None:
        calls.append(len(batch.records))
        if len(calls) == 1:
            raise RuntimeError("transient")  # retried after the back-off below
        return None

    metrics = Lags()
    retry = RetryPolicy(
        base_backoff_millis=3_000, max_backoff_millis=3_000, bisect_on_error=False, rng=random.Random(1)
    )
    processor = function_processor(handler, policy=retry, clock=rig.clock, metrics=metrics)
    for wrapped in (processor, OwnShardIds(processor, ShardInfo("s1"))):
        assert getattr(wrapped, "records_end_to_end_lag", False) is True
    rig.drive(consumer(rig, processor, metrics))
    assert calls == [2, 2]
    # One figure, from the runner, taken after the retry's back-off; none from the shard consumer.
    ((lag, shard),) = metrics.lags
    assert shard == "s1" and lag >= 3_000

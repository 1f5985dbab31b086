"""The processors a simulated worker runs, as a user would write them, and the ledger they keep.

Each is named in the history's settings (``processing.processor: simulation.processors:...``)
and built by the product's own registry (:func:`consumer.runtime.processors.build_processor_factory`)
with ``processing.options`` naming the history's :class:`Ledger` and the worker, so the failure
policy, lanes, windows, dead letters and the change-log sink wrap them exactly as in production:

* :class:`Recorder` — the function form (``handle(batch)``): handles a batch at once after checking
  ``lease_held()`` (a careful handler: a side effect only while the lease is held), reports a
  failing record with a partial batch failure (:class:`BatchResult`), sometimes slowly;
* :class:`ClassRecorder` — the class form: checkpoints after every batch (a throttled checkpoint is
  left to the next one, as a careful user does) and SHARD_END at the end; a call fails as a whole
  at the history's ``fail_rate``, or when its batch holds a flaky record (directed histories);
* :class:`WindowRecorder` — a tumbling-window handler: the window's state is the list of sequence
  numbers counted in it, recorded when the window's final call comes;
* :class:`RecordingChangelog` — the built-in change-log sink on the simulated S3 bucket, with each
  batch it landed recorded (what the chaos demo's verdict counts as delivered).

Poison records (always fail) and flaky ones (fail their first few calls) are drawn per history; the
checker (simulation/checker.py) judges what the ledger recorded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from consumer.leases.errors import LeaseError, LeaseLostError
from consumer.processing.api import (
    Batch,
    BatchResult,
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.processing.errors import HandlerStoppedError
from consumer.processing.windows import WindowedBatch
from consumer.sinks.changelog import ChangelogSink, ChangelogStore
from simulation.ddb_tables import Tables
from simulation.kernel import Kernel
from simulation.sinks import CHANGELOG

LEDGERS: dict[str, Ledger] = {}  # history id -> its ledger (processing.options name it)


class RecordFailedError(Exception):
    """A record the handler cannot handle (this time, or ever: a poison record)."""


@dataclass(frozen=True)
class Handled:
    """One record handled. ``exact``: recorded at the moment the lease was checked (nothing in
    between), so whom the table named as the owner then is meaningful; ``final``: counts for the
    promise that nothing is handled twice (a window's records count only through its final state)."""

    index: int  # in execution order
    at: int
    shard_id: str
    sequence_number: int
    worker: str
    table_owner: str | None
    counter: int | None
    exact: bool
    final: bool


@dataclass(frozen=True)
class Final:
    """A window's final call: the state it closes (the sequence numbers counted in it)."""

    index: int
    at: int
    worker: str
    shard_id: str
    window_start: float
    sequence_numbers: tuple[int, ...]


@dataclass
class Ledger:
    kernel: Kernel
    table: Tables
    rng: random.Random
    poison: frozenset[int] = frozenset()
    flaky: dict[int, int] = field(default_factory=dict)  # sequence number -> failures left
    slow_rate: float = 0.0  # share of calls that take long (a slow downstream)
    slow_millis: int = 0
    fail_rate: float = 0.0  # share of class-form calls that fail as a whole (transient)
    handled: list[Handled] = field(default_factory=list)
    finals: list[Final] = field(default_factory=list)
    failures: dict[int, int] = field(default_factory=dict)  # sequence number -> failed calls with it
    _count: int = 0

    def _next(self) -> int:
        self._count += 1
        return self._count

    def fails(self, sequence_number: int) -> bool:
        """Does the handler fail on this record this time (a poison record always does)?"""
        if sequence_number in self.poison:
            return True
        left = self.flaky.get(sequence_number, 0)
        if left:
            self.flaky[sequence_number] = left - 1
            return True
        return False

    def failed(self, records: Any) -> None:
        """A handler call failed on these records (whatever the cause: the record, or the sink)."""
        for number in numbers(records):
            self.failures[number] = self.failures.get(number, 0) + 1

    def work(self) -> None:
        """The handler's own time: mostly quick, sometimes a slow downstream call."""
        if self.slow_rate and self.rng.random() < self.slow_rate:
            self.kernel.sleep(self.rng.randint(1, self.slow_millis))
        else:
            self.kernel.sleep(self.rng.randint(0, 5))

    def record(self, worker: str, shard_id: str, numbers: list[int], *, exact: bool, final: bool) -> None:
        lease = self.table.get(shard_id)
        owner, counter = (None, None) if lease is None else (lease.owner, lease.counter)
        for number in numbers:
            self.handled.append(
                Handled(self._next(), self.kernel.now, shard_id, number, worker, owner, counter, exact, final)
            )

    def close(self, worker: str, shard_id: str, start: float, numbers: list[int]) -> None:
        self.finals.append(Final(self._next(), self.kernel.now, worker, shard_id, start, tuple(numbers)))


def numbers(records: Any) -> list[int]:
    return [int(r.sequence_number) for r in records]


class Recorder:
    """The function form: ``handle(batch)``."""

    def __init__(self, ledger: str, worker: str) -> None:
        self._ledger, self._worker = ledger, worker

    def handle(self, batch: Batch) -> BatchResult | None:
        ledger = LEDGERS[self._ledger]
        ledger.work()
        if not batch.lease_held():
            raise HandlerStoppedError(f"{batch.shard_id}: the lease is not held; not handling")
        for index, record in enumerate(batch.records):
            if ledger.fails(int(record.sequence_number)):
                ledger.record(
                    self._worker, batch.shard_id, numbers(batch.records[:index]), exact=True, final=True
                )
                ledger.failed(batch.records[index:])
                if index == 0:
                    raise RecordFailedError(f"record {record.sequence_number} failed")
                return BatchResult.failed(record, error="record failed")
        ledger.record(self._worker, batch.shard_id, numbers(batch.records), exact=True, final=True)
        return None


class ClassRecorder:
    """The class form: the user checkpoints after every batch."""

    def __init__(self, ledger: str, worker: str) -> None:
        self._ledger, self._worker = ledger, worker

    def initialize(self, initialization: InitializationInput) -> None:
        return None

    def process_records(self, process: ProcessRecordsInput) -> None:
        ledger = LEDGERS[self._ledger]
        ledger.work()
        if ledger.fail_rate and ledger.rng.random() < ledger.fail_rate:
            raise RecordFailedError(f"{process.shard.shard_id}: the downstream refused the batch")
        if any([ledger.fails(number) for number in numbers(process.records)]):  # a flaky record
            ledger.failed(process.records)
            raise RecordFailedError(f"{process.shard.shard_id}: the downstream refused a record")
        if not process.lease_held():
            raise HandlerStoppedError(f"{process.shard.shard_id}: the lease is not held; not handling")
        ledger.record(self._worker, process.shard.shard_id, numbers(process.records), exact=True, final=True)
        try:
            process.checkpointer.checkpoint()
        except LeaseLostError:
            raise
        except LeaseError:
            # Throttled or timed out: the batch is handled; raising would have it delivered again.
            # The next batch's checkpoint covers it (a careful KCL user does the same).
            pass

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        return None

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        shard_ended.checkpointer.checkpoint_shard_end()

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        shutdown.checkpointer.checkpoint()


class WindowRecorder:
    """A tumbling-window handler: its state is what it counted."""

    def __init__(self, ledger: str, worker: str) -> None:
        self._ledger, self._worker = ledger, worker

    def handle(self, batch: WindowedBatch) -> dict[str, Any] | None:
        ledger = LEDGERS[self._ledger]
        counted = list(batch.state.get("counted", []))
        if batch.window.is_final:
            ledger.close(self._worker, batch.shard_id, batch.window.start, counted)
            return None
        ledger.work()
        for record in batch.records:
            if ledger.fails(int(record.sequence_number)):
                ledger.failed(batch.records)
                raise RecordFailedError(f"record {record.sequence_number} failed")
        if not batch.lease_held():
            raise HandlerStoppedError(f"{batch.shard_id}: the lease is not held; not counting")
        ledger.record(self._worker, batch.shard_id, numbers(batch.records), exact=True, final=False)
        return {"counted": counted + numbers(batch.records)}


class RecordingChangelog:
    """The built-in change-log sink, landing on the simulated bucket; what it landed is recorded."""

    def __init__(self, ledger: str, worker: str, s3: Any) -> None:
        self._ledger, self._worker = ledger, worker
        self._sink = ChangelogSink(ChangelogStore(CHANGELOG, s3_client=s3), "orders", now=self._now)

    def _now(self) -> float:
        return LEDGERS[self._ledger].kernel.now / 1000

    def shard_started(self, shard: Any, checkpoint: str) -> None:
        self._sink.shard_started(shard, checkpoint)

    def shard_stopped(self, shard: Any) -> None:
        self._sink.shard_stopped(shard)

    def handle(self, batch: Batch) -> BatchResult | None:
        ledger = LEDGERS[self._ledger]
        ledger.work()
        failing = next(
            (i for i, record in enumerate(batch.records) if ledger.fails(int(record.sequence_number))), None
        )
        if failing == 0:
            ledger.failed(batch.records)
            raise RecordFailedError(f"record {batch.records[0].sequence_number} failed")
        landing = batch.records if failing is None else batch.records[:failing]
        try:
            self._sink(replace(batch, records=landing))
        except HandlerStoppedError:
            raise
        except Exception:
            ledger.failed(batch.records)
            raise
        ledger.record(self._worker, batch.shard_id, numbers(landing), exact=False, final=True)
        if failing is None:
            return None
        ledger.failed(batch.records[failing:])
        return BatchResult.failed(batch.records[failing], error="record failed")

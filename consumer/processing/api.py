"""The processor API: what the lifecycle calls, and what a user implements.

Two forms, one interface seen by the lifecycle:

* the **class form** (:class:`RecordProcessor`): five methods, each taking one small frozen input,
  for users who decide themselves when to checkpoint (KCL's ``ShardRecordProcessor`` shape);
* the **function form**: ``handle(batch: Batch) -> None | BatchResult``. A normal return means the
  whole batch succeeded; a :class:`BatchResult` names the records that failed (partial batch
  failure, as AWS Lambda does it). :mod:`consumer.processing.function_processor` adapts it — with
  the failure policy, filters and batching — to the class form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from consumer.processing.gap import GapEvent
from consumer.records import ShardInfo, StreamRecord


class Checkpointer(Protocol):
    """Records a shard's progress. The lifecycle implements it (so does the in-memory one for tests).

    ``checkpoint(None)`` means "the largest sequence number delivered so far". A sequence number
    outside (last checkpoint, largest delivered] raises ``CheckpointRefusedError``; a lease that is
    gone raises ``LeaseLostError`` (stop; never retry the checkpoint).
    """

    def checkpoint(self, sequence_number: str | None = None) -> None: ...

    def checkpoint_shard_end(self) -> None:
        """Only after the shard's last record was delivered: lets the child shards start."""
        ...

    def finished(self, sequence_numbers: Sequence[str]) -> None:
        """Records finished out of order, beyond what can be checkpointed yet (one lane of
        ``parallelization_factor`` ran ahead of another): never written to the leases table, but not
        delivered again while this worker keeps the shard — however often it fences itself and takes
        the lease back untouched."""
        ...


@dataclass(frozen=True, slots=True)
class InitializationInput:
    shard: ShardInfo
    checkpoint: str  # where processing resumes: a sequence number or TRIM_HORIZON / LATEST


def _never() -> bool:
    return False


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class ProcessRecordsInput:
    records: tuple[StreamRecord, ...]
    checkpointer: Checkpointer
    millis_behind_latest: int
    shard: ShardInfo
    # True once the lease is being lost or a shutdown was requested: long retries stop early.
    should_stop: Callable[[], bool] = field(default=_never)
    # False once the lease is lost or the worker fenced itself (a graceful stop keeps it true).
    lease_held: Callable[[], bool] = field(default=_always)


@dataclass(frozen=True, slots=True)
class LeaseLostInput:
    shard: ShardInfo


@dataclass(frozen=True, slots=True)
class ShardEndedInput:
    shard: ShardInfo
    checkpointer: Checkpointer
    should_stop: Callable[[], bool] = field(default=_never)  # lease lost while finishing


@dataclass(frozen=True, slots=True)
class ShutdownRequestedInput:
    shard: ShardInfo
    checkpointer: Checkpointer
    should_stop: Callable[[], bool] = field(default=_never)  # e.g. the shutdown grace period ran out


@dataclass(frozen=True, slots=True)
class GapInput:
    """``worker.on_trimmed: reload``: the shard's data was trimmed before it was read (``event``;
    docs/processing.md). An optional method of the class form, ``gap(gap: GapInput)``, is called
    with phase ``gap`` before the re-loaded records and with phase ``reloaded`` after them. The
    ``checkpointer`` is the shard's: it may checkpoint what was delivered before the gap, never more."""

    event: GapEvent
    checkpointer: Checkpointer
    should_stop: Callable[[], bool] = field(default=_never)
    lease_held: Callable[[], bool] = field(default=_always)


@dataclass(frozen=True, slots=True)
class ReloadedInput:
    """A page of re-loaded records (every ``record.reloaded``), for a processor with the optional
    ``process_reloaded`` method; one without it gets them through ``process_records`` with a
    checkpointer that records nothing (they are no position in the shard). Raising: delivered again."""

    records: tuple[StreamRecord, ...]
    gap: GapEvent
    shard: ShardInfo
    should_stop: Callable[[], bool] = field(default=_never)
    lease_held: Callable[[], bool] = field(default=_always)


@runtime_checkable
class RecordProcessor(Protocol):
    """One shard's processor, created per lease by the :data:`ProcessorFactory`."""

    def initialize(self, initialization: InitializationInput) -> None: ...

    def process_records(self, process: ProcessRecordsInput) -> None:
        """Handle the batch and checkpoint what is done. Raising means: deliver it again later."""
        ...

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        """Another worker owns the shard now: stop; checkpointing would raise LeaseLostError."""
        ...

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        """The shard is finished: call ``checkpointer.checkpoint_shard_end()`` so children can start."""
        ...

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        """Graceful stop or hand-off: checkpoint what is processed; the lease is released after."""
        ...


class ProcessorFactory(Protocol):
    def __call__(self, shard: ShardInfo) -> RecordProcessor: ...


@dataclass(frozen=True, slots=True)
class Batch:
    """What a function-form handler receives: records of one shard, in sequence order.

    With ``processing.parallelization_factor`` N > 1 the shard's records are spread over N lanes by
    a hash of their keys and the lanes run at once: a batch then holds only its lane's records
    (still in sequence order; every record of one item is in the same lane) and ``lane`` / ``lanes``
    say which. The handler is called from several threads at once then.

    ``should_stop()`` turns true when the lease is lost, the worker fenced itself or a stop or
    hand-over was asked for (retries and long work should end early). ``lease_held()`` turns false
    only when the lease is lost or fenced: a handler with a slow side effect checks it just before
    writing and raises ``HandlerStoppedError`` instead (the next owner delivers the batch again); on
    a graceful stop it stays true, so the batch in flight lands and is checkpointed.
    """

    shard: ShardInfo
    records: tuple[StreamRecord, ...]
    millis_behind_latest: int = 0
    should_stop: Callable[[], bool] = field(default=_never)
    lease_held: Callable[[], bool] = field(default=_always)
    # processing.parallelization_factor > 1: this batch is one lane's records (every record of a key
    # goes to the same lane, in order); ``lanes`` is the factor. 0 of 1 on the serial path.
    lane: int = 0
    lanes: int = 1
    # worker.on_trimmed=reload (docs/processing.md): a marker batch with no records says the shard
    # had a gap (``gap.phase`` "gap": a reload follows; "reloaded": it was delivered); ``reload`` is
    # set on a batch of re-loaded records: the gap they repair.
    gap: GapEvent | None = None
    reload: GapEvent | None = None

    @property
    def shard_id(self) -> str:
        return self.shard.shard_id


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Partial batch failure: the sequence numbers of the records that failed.

    Everything before the lowest failed record counts as done and is checkpointed; processing
    resumes *at* that record (later successes are delivered again: handlers must be idempotent).
    """

    failed_sequence_numbers: tuple[str, ...] = ()
    error: str | None = None  # why, recorded with the records if they end in the dead letter

    @classmethod
    def failed(cls, *records: StreamRecord, error: str | None = None) -> BatchResult:
        return cls(tuple(r.position for r in records), error)


BatchHandler = Callable[[Batch], "BatchResult | None"]


@runtime_checkable
class ShardScoped(Protocol):
    """Optional for a function-form handler that keeps state per shard (the ``changelog`` sink).

    The function form tells it when this worker starts a shard — every lease acquisition, with the
    checkpoint it resumes after — and when it stops it (lease lost, shard end, hand-off), so the
    state is loaded fresh for each ownership (another worker may have moved on meanwhile) and is
    dropped when the ownership ends instead of growing with every shard the worker ever held.
    """

    def shard_started(self, shard: ShardInfo, checkpoint: str) -> None: ...

    def shard_stopped(self, shard: ShardInfo) -> None: ...

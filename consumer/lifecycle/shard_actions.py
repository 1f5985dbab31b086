"""The vocabulary of a shard consumer's state machine (:mod:`consumer.lifecycle.shard_machine`).

What the machine asks its driver to do (**requests**, each answered with an **outcome**), what it
wants logged or counted (**notes**, not answered), and how a step ends (**yields**). Plain frozen
values, so a test can compare the actions a sequence of events produces with the ones it expects.
"""

from __future__ import annotations

from dataclasses import dataclass

from consumer.lifecycle.reload_run import Paced, Reloaded, ReloadRequest, ReloadStarted, Scanned
from consumer.lifecycle.states import Lifecycle, ShardEvent, ShardState, ShutdownReason
from consumer.processing.redelivery import DoneSequences
from consumer.records import StreamRecord
from ground.positions import ordinal

# ------------------------------------------------------------------------------------ requests


@dataclass(frozen=True, slots=True)
class CheckParents:
    """Are the parents finished? Answer :class:`ParentsChecked`."""

    parent_shard_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Initialize:
    """Call the processor's ``initialize`` with where processing resumes. Answer :class:`Done`."""

    checkpoint: str


@dataclass(frozen=True, slots=True)
class GetIterator:
    """GetShardIterator at ``position``. Answer :class:`IteratorAt`. ``after_trim``: the shard's
    data was trimmed and ``on_trimmed`` says go on at the oldest record left."""

    position: str
    after_trim: bool = False


@dataclass(frozen=True, slots=True)
class Fetch:
    """GetRecords. Answer :class:`Fetched`."""

    iterator: str
    limit: int


@dataclass(frozen=True, slots=True)
class Deliver:
    """Hand ``records`` to the processor (``attempt`` > 0: delivered again). Answer :class:`Done`."""

    records: tuple[StreamRecord, ...]
    millis_behind_latest: int
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class EndShard:
    """The shard is read to its end: the processor's ``shard_ended`` (it must checkpoint SHARD_END).
    Answer :class:`Done`; the checkpoint passed with it says whether it did."""


@dataclass(frozen=True, slots=True)
class StopProcessor:
    """Tell the processor why it stops (``LEASE_LOST``: ``lease_lost``; ``REQUESTED``:
    ``shutdown_requested``) — only if ``initialized``. Answer :class:`Done`."""

    reason: ShutdownReason
    initialized: bool


@dataclass(frozen=True, slots=True)
class Release:
    """Give the lease up after a graceful stop. Answer :class:`Done`."""


@dataclass(frozen=True, slots=True)
class ShardFinished:
    """SHARD_END is checkpointed: tell shard sync (its children may be leased). Answer :class:`Done`."""


Request = (
    CheckParents
    | Initialize
    | GetIterator
    | Fetch
    | Deliver
    | EndShard
    | StopProcessor
    | Release
    | ShardFinished
    | ReloadRequest  # consumer.lifecycle.reload_run: worker.on_trimmed=reload
)

# --------------------------------------------------------------------------------------- notes


@dataclass(frozen=True, slots=True)
class Moved:
    before: Lifecycle
    after: Lifecycle
    event: ShardEvent


@dataclass(frozen=True, slots=True)
class Retrying:
    """A request failed (``error``); the step runs again after ``delay_millis``."""

    state: ShardState
    error: Exception
    delay_millis: int


@dataclass(frozen=True, slots=True)
class InitializeRetry:
    error: Exception
    delay_millis: int


@dataclass(frozen=True, slots=True)
class Redeliver:
    """The processor failed on ``records`` records; they are delivered again after the delay."""

    records: int
    attempt: int
    error: Exception
    delay_millis: int


@dataclass(frozen=True, slots=True)
class StuckOnMalformed:
    """The next record has no usable sequence number: nothing from it on is delivered."""

    record: StreamRecord
    checkpoint: str
    delay_millis: int


@dataclass(frozen=True, slots=True)
class IteratorExpired:
    position: str


@dataclass(frozen=True, slots=True)
class TrimmedLoss:
    position: str
    error: Exception
    on_trimmed: str


@dataclass(frozen=True, slots=True)
class ShardEndNotCheckpointed:
    """``shard_ended`` returned without checkpointing SHARD_END: the children stay blocked."""


Note = (
    Moved
    | Retrying
    | InitializeRetry
    | Redeliver
    | StuckOnMalformed
    | IteratorExpired
    | TrimmedLoss
    | ShardEndNotCheckpointed
    | Reloaded
)

# -------------------------------------------------------------------------------------- yields


@dataclass(frozen=True, slots=True)
class Wait:
    """The step is over: run the next one at ``until`` (monotonic ms)."""

    until: int


@dataclass(frozen=True, slots=True)
class Finished:
    """The consumer is done (SHUTDOWN_COMPLETE): nothing more to run."""


Action = Request | Note | Wait | Finished

# ------------------------------------------------------------------------------------ outcomes


@dataclass(frozen=True, slots=True)
class ParentsChecked:
    pending: int  # parents not finished yet


@dataclass(frozen=True, slots=True)
class IteratorAt:
    iterator: str


@dataclass(frozen=True, slots=True)
class Fetched:
    records: tuple[StreamRecord, ...]
    millis_behind_latest: int
    next_iterator: str | None  # None: the shard is read to its end


@dataclass(frozen=True, slots=True)
class Done:
    """The request was carried out (what it changed, the checkpoint, comes with :meth:`answer`)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The request raised ``error`` (never a fatal one: the driver raises those itself)."""

    error: Exception


Outcome = ParentsChecked | IteratorAt | Fetched | Done | Failed | ReloadStarted | Scanned | Paced


@dataclass
class Pending:
    """A batch the processor has not finished yet (delivered again until it succeeds).

    ``malformed``: the batch was cut before a record with a malformed sequence number; once it is
    done, the shard is read again from just after it (and stops at that record).
    """

    records: tuple[StreamRecord, ...]
    millis_behind_latest: int
    next_iterator: str | None
    failures: int = 0
    malformed: bool = False

    def undelivered(self, done: DoneSequences, processed_through: int) -> tuple[StreamRecord, ...]:
        """The batch cut to what is not done yet: above the floor and the ranges of ``done`` (the
        redelivery rule) and above ``processed_through``, what a refused checkpoint declared."""
        records = done.fresh(self.records).records
        # In order, so the first record decides whether any is at or below processed_through.
        if records and ordinal(records[0].position) <= processed_through:
            records = tuple(r for r in records if ordinal(r.position) > processed_through)
        return records


class ProtocolError(RuntimeError):
    """The driver broke the protocol (asked for an action with a request unanswered, or answered
    nothing): a bug in the driver, never a condition of the stream or the table."""

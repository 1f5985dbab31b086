"""One shard's consumer as a pure state machine: what happened goes in, what to do next comes out.

:class:`ShardMachine` holds everything one shard's consumer knows — where it is in the lifecycle
(:mod:`consumer.lifecycle.states`), the batch in hand, the iterator, the back-off, what is done
beyond the checkpoint — and does no I/O: it never calls the stream, the leases table or the
processor and never reads a clock (time comes in with every call). The driver,
:class:`consumer.lifecycle.shard_consumer.ShardConsumer`, asks it for the next action, performs it
and tells it the outcome, the way h11's protocol core or a TigerBeetle replica is driven. So a test,
or the simulator, can feed it any sequence of events — a fetch answered after the lease was lost, a
checkpoint refused while shutting down, a trim found at start — and check the actions that come out.

The protocol, one step at a time (:mod:`consumer.lifecycle.shard_actions` is its vocabulary):
:meth:`~ShardMachine.observe` what the driver sees at the start of a step (the lease lost or fenced,
a stop or hand-over asked for, the checkpoint); then :meth:`~ShardMachine.next_action` until it
yields: a **request** is performed and answered (:meth:`~ShardMachine.answer`: its outcome, or
``Failed`` with what it raised), a **note** is logged or counted, ``Wait`` ends the step until a
time, ``Finished`` ends the consumer.

What it decides: nothing moves a checkpoint here (the processor does, through the checkpointer;
SHARD_END only once the processor checkpointed it); a batch the processor fails on is delivered again
after a back-off, cut to what is not done yet (the redelivery rule,
:mod:`consumer.processing.redelivery`), never skipped; a transient error (throttled table or stream, a
processor method that raised) is retried with exponential back-off per shard; ``LeaseLostError`` turns
any state into LEASE_LOST (nothing is checkpointed any more) unless the processor's part of the
shutdown is over already. What is *fatal* never reaches the machine: the driver raises it.

What is done beyond the checkpoint (:attr:`ShardMachine.done`): the checkpoint is the floor, and
records a processor finished out of order above it — lanes of ``processing.parallelization_factor``
finish at their own pace, and the checkpoint waits for the slowest — are kept as ranges. A batch
delivered again skips them. When the consumer stops because its worker fenced itself, the scheduler
hands this to the next consumer of the shard if the worker takes the lease back under the same
ownership (nobody held it in between), so a take-back never replays what a lane had finished.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from consumer.leases.errors import LeaseLostError
from consumer.lifecycle.failures import Backoff, first_malformed, outage_cap_millis
from consumer.lifecycle.polling import next_read_delay, parent_poll_wait
from consumer.lifecycle.reload_run import DeliverReload, EndReload, ReloadRun, ScanPage, StartReload
from consumer.lifecycle.shard_actions import (
    Action,
    CheckParents,
    Deliver,
    EndShard,
    Failed,
    Fetch,
    Fetched,
    Finished,
    GetIterator,
    Initialize,
    InitializeRetry,
    IteratorAt,
    IteratorExpired,
    Moved,
    Note,
    Outcome,
    ParentsChecked,
    Pending,
    ProtocolError,
    Redeliver,
    Release,
    Request,
    Retrying,
    ShardEndNotCheckpointed,
    ShardFinished,
    StopProcessor,
    StuckOnMalformed,
    Wait,
)
from consumer.lifecycle.shard_gaps import ShardGaps, _created
from consumer.lifecycle.states import Lifecycle, ShardEvent, ShardState, ShutdownReason
from consumer.processing.redelivery import DoneSequences, floor_of
from consumer.records import ShardInfo
from consumer.streams.errors import (
    ExpiredIteratorError,
    InvalidStreamRequestError,
    ShardNotFoundError,
    TrimmedDataError,
)
from ground.positions import SHARD_END, is_position, ordinal
from ground.settings import WorkerSettings

S, E, R = ShardState, ShardEvent, ShutdownReason


@dataclass
class ShardMachine(ShardGaps):
    shard: ShardInfo
    checkpoint: str  # the last checkpoint, as the checkpointer reports it
    settings: WorkerSettings
    read_limit: int  # each GetRecords' Limit; a batch of this many records is full (more is waiting)
    rng: random.Random = field(default_factory=random.Random)
    done: DoneSequences = field(default_factory=DoneSequences)  # carried or new: module docstring
    life: Lifecycle = field(default_factory=Lifecycle)
    iterator: str | None = None
    pending: Pending | None = None
    delivered_through: str | None = None  # the last record handed to the processor
    empty_polls: int = 0  # empty answers in a row (adaptive polling: consumer/lifecycle/polling.py)
    parent_polls: int = 0  # parent checks that found a parent unfinished (parent_poll_wait)
    read_started: int = 0  # when the last GetRecords was asked for
    gone_since: int | None = None  # when the shard was first found missing (ShardNotFound)
    already_ended: bool = False  # the lease was at SHARD_END when this consumer started
    initialized: bool = False  # the processor's initialize returned: it may be told to stop
    processor_stopped: bool = False  # the processor's part of the shutdown is over
    # Declared processed by a checkpoint the table refused for now: not delivered again by this
    # consumer (never carried to the next one, whose processor resumes from the lease's checkpoint).
    processed_through: int = -1
    # on_trimmed=reload: a gap's last position read, the shard gone, the reload run (shard_gaps.py)
    gap_from: str | None = None
    gap_gone: bool = False
    reload: ReloadRun | None = None
    last_created: float | None = None  # the creation time of the last record delivered
    backoff: Backoff = field(init=False)  # failures in a row and the next wait, from rng
    _notes: deque[Note] = field(default_factory=deque, repr=False)
    _request: Request | None = field(default=None, repr=False)
    _then: Request | Wait | Finished | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.backoff = Backoff(self.settings.task_backoff_time_millis, self.rng)
        self.done.advance(floor_of(self.checkpoint))

    @property
    def resume_position(self) -> str:
        """Where to read again from: just after what was delivered, else the checkpoint."""
        return self.delivered_through if self.delivered_through is not None else self.checkpoint

    def observe(self, *, lease_gone: bool, stop: bool, checkpoint: str) -> None:
        """The start of a step: the lease lost or fenced (``lease_gone``), a stop or hand-over asked
        for (``stop``), the checkpoint as it is now.

        A shutdown being retried (a throttled checkpoint, say) still turns into LEASE_LOST when the
        lease goes meanwhile: nothing may be checkpointed any more. Not once the processor's part is
        over, or SHARD_END is checkpointed: the lease was released or finished by this consumer.
        """
        if self._request is not None:
            raise ProtocolError(f"{self.shard.shard_id}: {self._request} is not answered")
        self._checkpointed(checkpoint)
        if self.life.finished:
            return
        if self.life.state is S.SHUTTING_DOWN:
            past_the_processor = self.processor_stopped or self.checkpoint == SHARD_END
            if lease_gone and self.life.reason is not R.LEASE_LOST and not past_the_processor:
                self._go(E.LEASE_LOST)
        elif lease_gone:
            self._go(E.LEASE_LOST)
        elif stop:
            self._go(E.SHUTDOWN_REQUESTED)

    def next_action(self, now: int) -> Action:
        if self._notes:
            return self._notes.popleft()
        if self._request is not None:
            raise ProtocolError(f"{self.shard.shard_id}: {self._request} is not answered")
        then, self._then = self._then, None
        action = then if then is not None else self._decide(now)
        if self._notes:  # deciding moved the lifecycle: say so before acting
            self._then = action
            return self._notes.popleft()
        if isinstance(action, Wait | Finished):
            return action
        self._request = action
        return action

    def answer(
        self,
        outcome: Outcome,
        now: int,
        *,
        checkpoint: str,
        finished: tuple[str, ...] = (),
        declared: str | None = None,
    ) -> None:
        """The outcome of the request :meth:`next_action` returned last, with the checkpoint as the
        processor left it, the records it ``finished`` beyond it (out of order: lanes) and the
        furthest checkpoint it ``declared`` even if the table refused it for now."""
        request, self._request = self._request, None
        if request is None:
            raise ProtocolError(f"{self.shard.shard_id}: {outcome} answers no request")
        self._checkpointed(checkpoint)
        if declared is not None and is_position(declared):
            self.processed_through = max(self.processed_through, ordinal(declared))
        for position in finished:
            self.done.add(ordinal(position), ordinal(position))
        if isinstance(outcome, Failed):
            self._then = self._failed(request, outcome.error, now)
        else:
            self._then = self._succeeded(request, outcome, now)

    def _decide(self, now: int) -> Request | Wait | Finished:
        state = self.life.state
        if self.reload is not None and state in (S.INITIALIZING, S.PROCESSING):
            return self._reload_request()
        if state is S.WAITING_ON_PARENT_SHARDS:
            if is_position(self.checkpoint) or self.checkpoint == SHARD_END:
                # A position inside the shard: some worker processed it, which it did only once its
                # parents were finished, and a finished shard stays finished. Skipping the reads
                # shortens every move of a lease (a rolling deploy moves them all).
                self._go(E.PARENTS_DONE)
                return self._decide(now)
            return CheckParents(self.shard.parent_shard_ids)
        if state is S.INITIALIZING:
            if not self.initialized:
                return Initialize(self.checkpoint)
            if self.checkpoint == SHARD_END:
                # Finished before we got it (a previous owner checkpointed SHARD_END): nothing to read.
                self.already_ended = True
                self._go(E.SHARD_END)
                return Wait(now)
            return GetIterator(self.checkpoint)
        if state is S.PROCESSING:
            if self.pending is not None:
                return self._deliver()
            if self.iterator is None:
                return GetIterator(self.resume_position)
            self.read_started = now
            return Fetch(self.iterator, self.read_limit)
        if state is S.SHUTTING_DOWN:
            return self._shut_down()
        return Finished()

    def _deliver(self) -> Deliver:
        """The batch in hand, cut to what is not done yet (after a failure: after the checkpoint)."""
        pending = self.pending
        assert pending is not None
        records = pending.undelivered(self.done, self.processed_through)
        if records:
            self.delivered_through = records[-1].position
            self.last_created = _created(records[-1])
        return Deliver(records, pending.millis_behind_latest, pending.failures)

    def _shut_down(self) -> Request | Finished:
        """Tell the processor why it stops (if it was initialized), then finish the lease's part."""
        reason = self.life.reason
        if not self.processor_stopped:
            if reason is R.SHARD_END:  # only ever reached after initialize
                if not (self.already_ended or self.checkpoint == SHARD_END):
                    return EndShard()
                self.processor_stopped = True
            else:
                assert reason is not None
                return StopProcessor(reason, self.initialized)
        if reason is R.SHARD_END:
            return ShardFinished()
        if reason is R.REQUESTED:
            return Release()
        self._go(E.SHUTDOWN_DONE)
        return Finished()

    def _succeeded(self, request: Request, outcome: Outcome, now: int) -> Request | Wait | Finished | None:
        if isinstance(request, StartReload | ScanPage | DeliverReload | EndReload):
            return self._reload_answered(request, outcome, now)
        if isinstance(request, CheckParents):
            assert isinstance(outcome, ParentsChecked)
            self.backoff.reset()
            if outcome.pending:
                self._go(E.PARENTS_PENDING)
                self.parent_polls += 1
                return Wait(now + parent_poll_wait(self.parent_polls, self.settings))
            self._go(E.PARENTS_DONE)
            return Wait(now)
        if isinstance(request, Initialize):
            # Not again, even if a later part of the step fails (a throttled GetShardIterator).
            self.initialized = True
            self.backoff.reset()
            return None
        if isinstance(request, GetIterator):
            assert isinstance(outcome, IteratorAt)
            self.iterator = outcome.iterator
            if self.life.state is S.INITIALIZING:
                self._go(E.INITIALIZED)
                return Wait(now)
            return Wait(now) if request.after_trim else None  # else: fetch in the same step
        if isinstance(request, Fetch):
            assert isinstance(outcome, Fetched)
            return self._fetched(outcome, now)
        if isinstance(request, Deliver):
            return self._delivered(now)
        if isinstance(request, EndShard):
            if self.checkpoint == SHARD_END:
                self.processor_stopped = True
                return None
            self._notes.append(ShardEndNotCheckpointed())
            return Wait(now + self.backoff.next_millis())
        if isinstance(request, StopProcessor):
            self.processor_stopped = True
            return None
        # Release, ShardFinished: the lease's part is over.
        self._go(E.SHUTDOWN_DONE)
        return Finished()

    def _fetched(self, fetched: Fetched, now: int) -> Wait | None:
        records = fetched.records
        cut = first_malformed(records)
        if cut == 0:
            delay = self.backoff.next_millis()
            self._notes.append(StuckOnMalformed(records[0], self.checkpoint, delay))
            return Wait(now + delay)
        if cut is not None:
            self.pending = Pending(
                records[:cut], fetched.millis_behind_latest, fetched.next_iterator, malformed=True
            )
            self._reload_before(self.pending.records, now)
            return None  # delivered in the same step (after a reload, if one is due)
        self.backoff.reset()
        self.gone_since = None
        if self.gap_from is not None:  # the first read after a gap: the reload goes before it
            self.pending = Pending(records, fetched.millis_behind_latest, fetched.next_iterator)
            self._reload_before(records, now)
            return None
        if not records and not self.settings.call_process_records_even_for_empty_record_list:
            return self._advance(
                fetched.next_iterator, now, records=0, full=False, behind=fetched.millis_behind_latest
            )
        self.pending = Pending(records, fetched.millis_behind_latest, fetched.next_iterator)
        return None

    def _delivered(self, now: int) -> Wait:
        pending = self.pending
        assert pending is not None
        self.pending = None
        if pending.malformed:
            # Read again from just after what was delivered: the read stops at the malformed record.
            self.iterator = None
            self._go(E.BATCH)
            return Wait(now)
        self.backoff.reset()
        return self._advance(
            pending.next_iterator,
            now,
            records=len(pending.records),
            full=len(pending.records) >= self.read_limit,
            behind=pending.millis_behind_latest,
        )

    def _advance(self, next_iterator: str | None, now: int, *, records: int, full: bool, behind: int) -> Wait:
        self.iterator = next_iterator
        if next_iterator is None:
            self._go(E.SHARD_END)
            return Wait(now)
        self._go(E.BATCH)
        self.empty_polls = 0 if records else self.empty_polls + 1
        return Wait(
            now
            + next_read_delay(
                self.settings,
                records=records,
                full=full,
                behind_millis=behind,
                empty_polls=self.empty_polls,
                since_read_started=now - self.read_started,
            )
        )

    def _failed(self, request: Request, error: Exception, now: int) -> Request | Wait:
        if isinstance(request, StartReload | ScanPage | DeliverReload | EndReload):
            return self._retry(error, now)  # the run asks for the same again (a new start: a new stamp)
        if isinstance(request, Initialize):
            delay = self.backoff.next_millis()
            self._notes.append(InitializeRetry(error, delay))
            return Wait(now + delay)
        trimmed = isinstance(error, TrimmedDataError | ShardNotFoundError)
        if trimmed and isinstance(request, Fetch | GetIterator) and not getattr(request, "after_trim", False):
            assert isinstance(error, TrimmedDataError | ShardNotFoundError)
            return self._trimmed(error, now)
        if isinstance(request, Fetch) and isinstance(error, ExpiredIteratorError | InvalidStreamRequestError):
            # An iterator not accepted any more: a new one, at once, after what was delivered.
            self._notes.append(IteratorExpired(self.resume_position))
            self.iterator = None
            return Wait(now)
        if isinstance(request, Deliver) and not isinstance(error, LeaseLostError):
            assert self.pending is not None
            self.pending.failures += 1
            delay = self.backoff.next_millis()
            self._notes.append(Redeliver(len(request.records), self.pending.failures, error, delay))
            return Wait(now + delay)
        return self._retry(error, now)

    def _retry(self, error: Exception, now: int) -> Wait:
        """The lease is gone, or try the same step again after a back-off."""
        if isinstance(error, LeaseLostError) and not self.processor_stopped:
            self._go(E.LEASE_LOST)  # never checkpoint again; the processor is told next step
            return Wait(now)
        delay = self.backoff.next_millis(outage_cap_millis(error, self.settings.taker_interval_millis))
        self._notes.append(Retrying(self.life.state, error, delay))
        return Wait(now + delay)

    def _checkpointed(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self.done.advance(floor_of(checkpoint))

    def _go(self, event: ShardEvent) -> None:
        before = self.life
        self.life = before.on(event)
        if self.life.state is not before.state:
            self._notes.append(Moved(before, self.life, event))

"""One shard's consumer: the thin driver of :class:`~consumer.lifecycle.shard_machine.ShardMachine`.

The scheduler calls :meth:`ShardConsumer.step` on a pool thread whenever the consumer is due, and
never runs two steps of one consumer at once; a step does one unit of work (check parents, fetch and
deliver one batch, shut down) and returns when it wants to run again. A blocked or idle shard is
therefore an entry in a timer heap, not a thread.

Every decision — what to do next, when to retry, what a failure means, what to deliver again — is
the machine's; this driver only carries its requests out against the ports (the lease coordinator,
the stream reader, the processor and the checkpointer it hands the processor), answers with what
happened, and logs and counts the machine's notes. Only what :func:`is_fatal` names — a settings
error, the stream or the leases table gone — leaves :meth:`ShardConsumer.step`, and the scheduler
ends the worker on it; any other error is the machine's to retry.

The processor is told about a shutdown only if its ``initialize`` succeeded: a consumer stopped
while it waited for its parents (or while ``initialize`` kept failing) just gives the lease back.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from consumer.leases.errors import LeaseLostError, LeaseStoreUnavailableError
from consumer.lifecycle.checkpointer import ShardCheckpointer
from consumer.lifecycle.failures import is_fatal, malformation, size_bytes
from consumer.lifecycle.ports import LeaseOps, StreamReader
from consumer.lifecycle.reload_driver import ReloadCall, ReloadDriver, Reloads
from consumer.lifecycle.reload_run import RELOAD_REQUESTS, Reloaded
from consumer.lifecycle.shard_actions import (
    Action,
    CheckParents,
    Deliver,
    Done,
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
    Outcome,
    ParentsChecked,
    Redeliver,
    Release,
    Request,
    Retrying,
    ShardEndNotCheckpointed,
    ShardFinished,
    StopProcessor,
    StuckOnMalformed,
    TrimmedLoss,
    Wait,
)
from consumer.lifecycle.shard_machine import ShardMachine
from consumer.lifecycle.states import Lifecycle, ShardEvent, ShardState, ShutdownReason
from consumer.processing.api import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.processing.failure_policy import record_end_to_end_lag
from consumer.processing.redelivery import DoneSequences
from consumer.records import ShardInfo
from consumer.streams.errors import StreamSourceError
from consumer.telemetry.catalogue import log_lease_lost_shutdown, log_trimmed_loss
from consumer.telemetry.context import shard_context
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.settings import WorkerSettings
from ground.threads import SYSTEM_THREADS, Threads

log = logging.getLogger("consumer.lifecycle")


class ShardConsumer:
    def __init__(
        self,
        shard: ShardInfo,
        checkpoint: str,
        *,
        leases: LeaseOps,
        reader: StreamReader,
        processor: RecordProcessor,
        settings: WorkerSettings,
        clock: Clock,
        metrics: Metrics | None = None,
        on_shard_end: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
        counter: int | None = None,
        done: DoneSequences | None = None,
        threads: Threads = SYSTEM_THREADS,
        reloads: Reloads | None = None,
    ) -> None:
        self.shard = shard
        # The lease counter this consumer's ownership began at: if the lease is lost and taken back (a
        # fence, a take-back), it moves and this consumer stops; a new one resumes at the checkpoint.
        self._counter = counter
        limit = settings.records_per_read(reader.most_records_per_read(shard.shard_id))
        self.machine = ShardMachine(
            shard, checkpoint, settings, limit, rng or random.Random(), done or DoneSequences()
        )
        self._leases = leases
        self._reader = reader
        self._processor = processor
        self._settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._on_shard_end = on_shard_end
        self.checkpointer = ShardCheckpointer(shard.shard_id, leases, checkpoint, counter, threads.lock())
        self._shutdown_requested = threads.event()
        self._lease_lost = threads.event()
        self.records_delivered = 0
        signals = (self._should_stop, self._lease_held)
        call = ReloadCall(processor, self.checkpointer, settings, clock, self._metrics, *signals)
        self._reload = ReloadDriver(shard, reloads, call)  # worker.on_trimmed=reload

    # ----------------------------------------------------------------------- signals (any thread)

    def request_shutdown(self) -> None:
        self._shutdown_requested.set()

    def lease_lost(self) -> None:
        self._lease_lost.set()

    @property
    def lease_lost_signalled(self) -> bool:
        return self._lease_lost.is_set()

    @property
    def awaiting_shutdown(self) -> bool:
        """A stop or a lost lease was signalled and the consumer has not begun shutting down yet: its
        next step should run now, not after the idle time its last step asked for."""
        signalled = self._shutdown_requested.is_set() or self._lease_lost.is_set()
        return signalled and self.life.state not in (ShardState.SHUTTING_DOWN, ShardState.SHUTDOWN_COMPLETE)

    def _should_stop(self) -> bool:
        return (
            self._lease_lost.is_set()
            or self._shutdown_requested.is_set()
            or not self._leases.may_process(self.shard.shard_id, self._counter)
        )

    def _lease_held(self) -> bool:
        return not self._lease_lost.is_set() and self._leases.may_process(self.shard.shard_id, self._counter)

    @property
    def life(self) -> Lifecycle:
        return self.machine.life

    @property
    def done(self) -> DoneSequences:
        """What this consumer's processor finished, beyond the checkpoint included (the machine's)."""
        return self.machine.done

    @property
    def counter(self) -> int | None:
        """The lease counter this consumer's ownership began at (None: not bound to one)."""
        return self._counter

    @property
    def shard_id(self) -> str:
        return self.shard.shard_id

    @property
    def finished(self) -> bool:
        return self.life.finished

    # -------------------------------------------------------------------------- the step

    def step(self) -> int | None:
        """Do one unit of work; return the monotonic time (ms) to run again, or None when done.

        Raises only what :func:`is_fatal` names: anything else is answered to the machine as failed.
        """
        with shard_context(self.shard_id):
            machine = self.machine
            lease_gone = self._lease_lost.is_set() or not self._leases.may_process(
                self.shard_id, self._counter
            )
            stop = self._shutdown_requested.is_set() or self._leases.handoff_requested(self.shard_id)
            machine.observe(lease_gone=lease_gone, stop=stop, checkpoint=self.checkpointer.last_checkpoint)
            while True:
                action: Action = machine.next_action(self._clock.monotonic_millis())
                if isinstance(action, Wait):
                    return action.until
                if isinstance(action, Finished):
                    return None
                if isinstance(action, Request):
                    outcome = self._perform(action)
                    machine.answer(
                        outcome,
                        self._clock.monotonic_millis(),
                        checkpoint=self.checkpointer.last_checkpoint,
                        finished=self.checkpointer.take_finished(),
                        declared=self.checkpointer.declared,
                    )
                else:
                    self._report(action)

    # ----------------------------------------------------------------------- the requests

    def _perform(self, request: Request) -> Outcome:
        try:
            return self._carry_out(request)
        except Exception as exc:
            if is_fatal(exc):
                raise
            return Failed(exc)

    def _carry_out(self, request: Request) -> Outcome:
        if isinstance(request, RELOAD_REQUESTS):
            return self._reload.carry_out(request)
        if isinstance(request, CheckParents):
            # A consistent read per parent: it may be throttled, and is then retried.
            pending = self._leases.waiting_parents(request.parent_shard_ids)
            if pending:
                self._metrics.count(
                    "BlockOnParentShardTask", "ShardsBlockedOnParent", 1, shard_id=self.shard_id
                )
            return ParentsChecked(len(pending))
        if isinstance(request, Initialize):
            self._processor.initialize(InitializationInput(self.shard, request.checkpoint))
            return Done()
        if isinstance(request, GetIterator):
            return IteratorAt(self._reader.iterator_at(self.shard_id, request.position))
        if isinstance(request, Fetch):
            return self._fetch(request)
        if isinstance(request, Deliver):
            return self._deliver(request)
        if isinstance(request, EndShard):
            self.checkpointer.at_shard_end = True
            self._processor.shard_ended(ShardEndedInput(self.shard, self.checkpointer, self._should_stop))
            return Done()
        if isinstance(request, StopProcessor):
            return self._stop_processor(request)
        if isinstance(request, Release):
            try:
                self._leases.release(self.shard_id, self._counter)
            except LeaseLostError:
                log.info("shard %s: nothing to release: the lease is another worker's already", self.shard_id)
            return Done()
        assert isinstance(request, ShardFinished)
        if self._on_shard_end is not None:
            self._on_shard_end(self.shard_id)
        return Done()

    def _fetch(self, request: Fetch) -> Outcome:
        started = self._clock.monotonic_millis()
        try:
            result = self._reader.fetch(self.shard_id, request.iterator, request.limit)
        except StreamSourceError:
            self._metrics.timing("Fetcher", "GetRecords", self._clock.monotonic_millis() - started, False)
            raise
        self._metrics.timing("Fetcher", "GetRecords", self._clock.monotonic_millis() - started, True)
        self._metrics.count("Fetcher", "StreamReadRequests", 1, shard_id=self.shard_id)
        return Fetched(result.records, result.millis_behind_latest, result.next_iterator)

    def _deliver(self, request: Deliver) -> Outcome:
        records = request.records
        before = self.checkpointer.largest_delivered
        if records:
            self.checkpointer.delivered(records[-1].position)
        started = self._clock.monotonic_millis()
        try:
            with self._leases.delivering(self.shard_id):
                self._processor.process_records(
                    ProcessRecordsInput(
                        records,
                        self.checkpointer,
                        request.millis_behind_latest,
                        self.shard,
                        self._should_stop,
                        self._lease_held,
                    )
                )
        except Exception:
            self.checkpointer.taken_back(before)  # delivered again later: not done until then
            raise
        elapsed = self._clock.monotonic_millis() - started
        sid = self.shard_id
        self._metrics.timing("ProcessTask", "RecordProcessor.processRecords", elapsed, True)
        self._metrics.count("ProcessTask", "RecordsProcessed", len(records), shard_id=sid)
        self._metrics.count("ProcessTask", "DataBytesProcessed", size_bytes(records), "Bytes", sid)
        self._metrics.gauge(
            "ProcessTask", "MillisBehindLatest", request.millis_behind_latest, "Milliseconds", sid
        )
        if records and not getattr(self._processor, "records_end_to_end_lag", False):
            # The class form has handled a batch it returned from (a function form's runner says when)
            record_end_to_end_lag(self._metrics, records[0], self._clock.wall_millis(), sid)
        self.records_delivered += len(records)
        return Done()

    def _stop_processor(self, request: StopProcessor) -> Outcome:
        if request.reason is ShutdownReason.LEASE_LOST:
            self._metrics.count("ShutdownTask", "ShutdownsLeaseLost", 1, shard_id=self.shard_id)
            log_lease_lost_shutdown(log, self.shard_id)
            if request.initialized:  # a processor never initialized is not told anything
                try:
                    self._processor.lease_lost(LeaseLostInput(self.shard))
                except Exception as exc:
                    if is_fatal(exc):
                        raise
                    log.error(
                        "shard %s: the processor's lease_lost failed: %r; shutting it down anyway "
                        "(the lease is gone)",
                        self.shard_id,
                        exc,
                        exc_info=exc,
                    )
        elif request.initialized:
            self._processor.shutdown_requested(
                ShutdownRequestedInput(self.shard, self.checkpointer, self._should_stop)
            )
        else:
            log.info("shard %s: stopped before the processor was initialized", self.shard_id)
        return Done()

    # -------------------------------------------------------------------------- the notes

    def _report(self, note: object) -> None:
        sid = self.shard_id
        if isinstance(note, Moved):
            reason = note.after.reason
            shown = f" ({reason.value})" if reason and note.event is not ShardEvent.SHUTDOWN_DONE else ""
            log.info("shard %s: %s -> %s%s", sid, note.before.state.value, note.after.state.value, shown)
        elif isinstance(note, Retrying):
            error, delay, state = note.error, note.delay_millis, note.state.value
            if isinstance(error, StreamSourceError | LeaseStoreUnavailableError):  # throttled: expected
                log.warning("shard %s: %s: %s; retrying in %d ms", sid, state, error, delay)
            else:
                log.error(
                    "shard %s: %s failed: %r; retrying in %d ms", sid, state, error, delay, exc_info=error
                )
        elif isinstance(note, InitializeRetry):
            log.error(
                "shard %s: the processor's initialize failed: %r; calling it again in %d ms",
                sid,
                note.error,
                note.delay_millis,
                exc_info=note.error,
            )
        elif isinstance(note, Redeliver):
            self._metrics.count("ProcessTask", "RecordsRetried", note.records, shard_id=sid)
            log.error(
                "shard %s: processor failed on %d records (attempt %d): %r; delivering them again in %d ms",
                sid,
                note.records,
                note.attempt,
                note.error,
                note.delay_millis,
            )
        elif isinstance(note, StuckOnMalformed):
            self._stuck_on_malformed(note)
        elif isinstance(note, IteratorExpired):
            self._metrics.count("Fetcher", "ExpiredIterator", 1, shard_id=sid)
            log.info("shard %s: iterator expired; re-acquiring after %s", sid, note.position)
        elif isinstance(note, TrimmedLoss):
            self._metrics.count("Fetcher", "RecordsTrimmedLost", 1, shard_id=sid)
            log_trimmed_loss(log, sid, note.position, str(note.error), note.on_trimmed)
        elif isinstance(note, Reloaded):
            self._reload.report(note)
        elif isinstance(note, ShardEndNotCheckpointed):
            log.error(
                "shard %s: the processor did not checkpoint SHARD_END in shard_ended; its children "
                "stay blocked until it does (retrying)",
                sid,
            )

    def _stuck_on_malformed(self, note: StuckOnMalformed) -> None:
        """The next record has a sequence number that is not digits: the shard stops before it, loudly.

        Such a record cannot be handled like a poison record. Its sequence number is its only
        position in the shard: the checkpointer refuses it, a dead letter could not name or order it,
        and a checkpoint moved past it (to the next good record) would record as done a record that
        no processor could finish — a silent skip. A malformed number also means the GetRecords body
        is not what DynamoDB Streams sends (a proxy, an emulator, corruption), so the records around
        it are suspect too. So: everything before it was delivered and may be checkpointed; it and
        everything after it are not delivered; the same read is retried with back-off (a corrupt
        response may read correctly next time) with an ERROR naming the shard and the record every
        time, until it reads well or an operator acts. Never fatal for the worker: other shards go on.
        """
        self._metrics.count("ProcessTask", "RecordsRetried", 1, shard_id=self.shard_id)
        log.error(
            "shard %s stuck before record %r: %s; it cannot be processed or checkpointed past, so "
            "nothing after it is delivered (last checkpoint %s); reading it again in %d ms",
            self.shard_id,
            note.record.event_id,
            malformation(note.record),
            note.checkpoint,
            note.delay_millis,
        )

"""One shard's consumer: runs the lifecycle of :mod:`consumer.lifecycle.states` one step at a time.

The scheduler calls :meth:`ShardConsumer.step` on a pool thread whenever the consumer is due, and
never runs two steps of one consumer at once; a step does one unit of work (check parents, fetch and
deliver one batch, shut down) and returns when it wants to run again. A blocked or idle shard is
therefore an entry in a timer heap, not a thread.

Nothing here moves a checkpoint by itself except at SHARD_END (where the processor must have
checkpointed) — progress is whatever the processor checkpointed through the
:class:`~consumer.lifecycle.checkpointer.ShardCheckpointer`. A batch the processor fails on is
delivered again (from just after its last checkpoint) after a back-off: never skipped.

Errors: a step never lets a transient error out. A throttled or unavailable leases table (a parent
check, a checkpoint while shutting down), a throttled stream, a processor method that raises: each
is logged with the shard id and the step is tried again after an exponential back-off (per shard,
so one throttled table slows shards down instead of taking workers down one by one). Only what
:func:`is_fatal` names — a settings error, the stream or the leases table gone — leaves
:meth:`ShardConsumer.step`, and the scheduler ends the worker on it.

The processor is told about a shutdown only if its ``initialize`` succeeded: a consumer stopped
while it waited for its parents (or while ``initialize`` kept failing) just gives the lease back.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

from consumer.leases.errors import LeaseLostError, LeaseStoreUnavailableError
from consumer.lifecycle.checkpointer import ShardCheckpointer
from consumer.lifecycle.failures import (
    MAX_BACKOFF_MILLIS,
    backoff_millis,
    first_malformed,
    is_fatal,
    malformation,
    outage_cap_millis,
    size_bytes,
)
from consumer.lifecycle.polling import next_read_delay
from consumer.lifecycle.ports import LeaseOps, StreamReader
from consumer.lifecycle.states import Lifecycle, ShardEvent, ShardState, ShutdownReason
from consumer.processing.api import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.processing.redelivery import DoneSequences, floor_of
from consumer.records import ShardInfo, StreamRecord
from consumer.streams.errors import (
    ExpiredIteratorError,
    InvalidStreamRequestError,
    ShardNotFoundError,
    StreamSourceError,
    TrimmedDataError,
)
from consumer.telemetry.catalogue import log_lease_lost_shutdown, log_trimmed_loss
from consumer.telemetry.context import shard_context
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.positions import SHARD_END, TRIM_HORIZON
from ground.settings import WorkerSettings

log = logging.getLogger("consumer.lifecycle")


@dataclass
class _Pending:
    """A batch the processor has not finished yet (delivered again until it succeeds).

    ``malformed``: the batch was cut before a record with a malformed sequence number; once it is
    done, the shard is read again from just after it (and stops at that record).
    """

    records: tuple[StreamRecord, ...]
    millis_behind_latest: int
    next_iterator: str | None
    failures: int = 0
    malformed: bool = False


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
    ) -> None:
        self.shard = shard
        # The lease counter this consumer's ownership began at: if the worker loses the lease and
        # takes it back (a fence, then a take-back), the counter moves and this consumer stops; a
        # new one starts from the table's checkpoint instead of this one's older position.
        self._counter = counter
        self.life = Lifecycle()
        self._leases = leases
        self._reader = reader
        self._processor = processor
        self._settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._on_shard_end = on_shard_end
        self._rng = rng or random.Random()
        self.checkpointer = ShardCheckpointer(shard.shard_id, leases, checkpoint, counter)
        # The redelivery rule (consumer/processing/redelivery.py) for this ownership: its floor
        # follows the checkpoint, so a batch delivered again is cut to what is not checkpointed yet.
        # One integer, dropped with the consumer when the lease is lost or the shard ends.
        self._done = DoneSequences(floor_of(checkpoint))
        self._iterator: str | None = None
        self._gone_since: int | None = None
        self._pending: _Pending | None = None
        self._backoff_failures = 0
        self._empty_polls = 0  # empty answers in a row (adaptive polling: consumer/lifecycle/polling.py)
        self._read_started = 0  # when the last GetRecords was sent (monotonic ms)
        self._already_ended = False
        self._initialized = False  # the processor's initialize returned: it may be told to stop
        self._processor_stopped = False  # the processor's part of the shutdown is over
        self._shutdown_requested = threading.Event()
        self._lease_lost = threading.Event()
        self.records_delivered = 0

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

        Raises only what :func:`is_fatal` names: anything else is logged and the step retried later.
        """
        with shard_context(self.shard_id):
            now = self._clock.monotonic_millis()
            try:
                return self._step(now)
            except Exception as exc:
                if is_fatal(exc):
                    raise
                return self._failed(exc, now)

    def _step(self, now: int) -> int | None:
        self._observe_signals()
        state = self.life.state
        if state is ShardState.WAITING_ON_PARENT_SHARDS:
            return self._wait_for_parents(now)
        if state is ShardState.INITIALIZING:
            return self._initialize(now)
        if state is ShardState.PROCESSING:
            return self._process(now)
        if state is ShardState.SHUTTING_DOWN:
            return self._shut_down(now)
        return None

    def _observe_signals(self) -> None:
        """Turn a lost lease, a stop or a hand-over request into the lifecycle's event.

        A shutdown being retried (a throttled checkpoint, say) still turns into LEASE_LOST when the
        lease goes meanwhile: nothing may be checkpointed any more. Not once the processor's part is
        over, or SHARD_END is checkpointed: the lease was released or finished by this consumer.
        """
        if self.life.finished:
            return
        lease_gone = self._lease_lost.is_set() or not self._leases.may_process(self.shard_id, self._counter)
        if self.life.state is ShardState.SHUTTING_DOWN:
            past_the_processor = self._processor_stopped or self.checkpointer.last_checkpoint == SHARD_END
            if lease_gone and self.life.reason is not ShutdownReason.LEASE_LOST and not past_the_processor:
                self._go(ShardEvent.LEASE_LOST)
        elif lease_gone:
            self._go(ShardEvent.LEASE_LOST)
        elif self._shutdown_requested.is_set() or self._leases.handoff_requested(self.shard_id):
            self._go(ShardEvent.SHUTDOWN_REQUESTED)

    def _failed(self, exc: Exception, now: int) -> int:
        """A step that raised: the lease is gone, or try the same step again after a back-off."""
        if isinstance(exc, LeaseLostError) and not self._processor_stopped:
            self._go(ShardEvent.LEASE_LOST)  # never checkpoint again; the processor is told next step
            return now
        delay = self._backoff(outage_cap_millis(exc, self._settings.taker_interval_millis))
        state = self.life.state.value
        if isinstance(
            exc, StreamSourceError | LeaseStoreUnavailableError
        ):  # throttled: expected now and then
            log.warning("shard %s: %s: %s; retrying in %d ms", self.shard_id, state, exc, delay)
        else:
            log.error(
                "shard %s: %s failed: %r; retrying in %d ms", self.shard_id, state, exc, delay, exc_info=exc
            )
        return now + delay

    def _go(self, event: ShardEvent) -> None:
        before = self.life
        self.life = self.life.on(event)
        if self.life.state is not before.state:
            log.info(
                "shard %s: %s -> %s%s",
                self.shard_id,
                before.state.value,
                self.life.state.value,
                f" ({self.life.reason.value})"
                if self.life.reason and event is not ShardEvent.SHUTDOWN_DONE
                else "",
            )

    def _backoff(self, cap_millis: int = MAX_BACKOFF_MILLIS) -> int:
        """The next delay after one more failure in a row (from task_backoff_time_millis up to the cap)."""
        self._backoff_failures += 1
        return backoff_millis(
            self._backoff_failures, self._settings.task_backoff_time_millis, self._rng, cap_millis
        )

    # ------------------------------------------------------------------------ the states

    def _wait_for_parents(self, now: int) -> int:
        # A consistent read per parent: it may be throttled, and is then retried by step().
        pending = [p for p in self.shard.parent_shard_ids if not self._leases.is_shard_finished(p)]
        self._backoff_failures = 0
        if pending:
            self._metrics.count("BlockOnParentShardTask", "ShardsBlockedOnParent", 1, shard_id=self.shard_id)
            self._go(ShardEvent.PARENTS_PENDING)
            return now + self._settings.parent_shard_poll_interval_millis
        self._go(ShardEvent.PARENTS_DONE)
        return now

    def _initialize(self, now: int) -> int:
        """Initialize the processor once, then find where to read.

        ``initialize`` is called again only if it raised; a later part of this step that fails (a
        throttled GetShardIterator) is retried without initializing the processor a second time.
        """
        start = self.checkpointer.last_checkpoint
        if not self._initialized:
            try:
                self._processor.initialize(InitializationInput(self.shard, start))
            except Exception as exc:
                if is_fatal(exc):
                    raise
                delay = self._backoff()
                log.error(
                    "shard %s: the processor's initialize failed: %r; calling it again in %d ms",
                    self.shard_id,
                    exc,
                    delay,
                    exc_info=exc,
                )
                return now + delay
            self._initialized = True
            self._backoff_failures = 0
        if start == SHARD_END:
            # Finished before we got it (a previous owner checkpointed SHARD_END): nothing to read.
            self.checkpointer.at_shard_end = True
            self._already_ended = True
            self._go(ShardEvent.SHARD_END)
            return now
        try:
            self._iterator = self._reader.iterator_at(self.shard_id, start)
        except (TrimmedDataError, ShardNotFoundError) as exc:
            return self._trimmed(exc, now)
        self._go(ShardEvent.INITIALIZED)
        return now

    def _resume_position(self) -> str:
        """Where to re-read from: just after what was delivered, else the checkpoint."""
        delivered = self.checkpointer.largest_delivered
        return delivered if delivered is not None else self.checkpointer.last_checkpoint

    def _process(self, now: int) -> int:
        if self._pending is None:
            try:
                fetched = self._fetch()
            except (TrimmedDataError, ShardNotFoundError) as exc:
                return self._trimmed(exc, now)
            if fetched is None:
                return now  # a new iterator was acquired: fetch again at once
            records, behind, next_iterator = fetched
            cut = first_malformed(records)
            if cut == 0:
                return self._stuck_on_malformed(records[0], now)
            if cut is not None:
                self._pending = _Pending(records[:cut], behind, next_iterator, malformed=True)
                return self._deliver(now)
            self._backoff_failures = 0
            self._gone_since = None
            if not records and not self._settings.call_process_records_even_for_empty_record_list:
                return self._advance(next_iterator, now, records=0, full=False, behind=behind)
            self._pending = _Pending(records, behind, next_iterator)
        return self._deliver(now)

    def _stuck_on_malformed(self, record: StreamRecord, now: int) -> int:
        """The next record has a sequence number that is not digits: stop the shard before it, loudly.

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
        delay = self._backoff()
        self._metrics.count("ProcessTask", "RecordsRetried", 1, shard_id=self.shard_id)
        log.error(
            "shard %s stuck before record %r: %s; it cannot be processed or checkpointed past, so "
            "nothing after it is delivered (last checkpoint %s); reading it again in %d ms",
            self.shard_id,
            record.event_id,
            malformation(record),
            self.checkpointer.last_checkpoint,
            delay,
        )
        return now + delay

    def _fetch(self) -> tuple[tuple[StreamRecord, ...], int, str | None] | None:
        if self._iterator is None:
            self._iterator = self._reader.iterator_at(self.shard_id, self._resume_position())
        started = self._read_started = self._clock.monotonic_millis()
        try:
            result = self._reader.fetch(self.shard_id, self._iterator, self._settings.max_records)
        except (ExpiredIteratorError, InvalidStreamRequestError):  # an iterator not accepted any more
            self._metrics.count("Fetcher", "ExpiredIterator", 1, shard_id=self.shard_id)
            log.info(
                "shard %s: iterator expired; re-acquiring after %s", self.shard_id, self._resume_position()
            )
            self._iterator = None
            return None
        except (TrimmedDataError, ShardNotFoundError):
            raise
        except StreamSourceError:
            self._metrics.timing("Fetcher", "GetRecords", self._clock.monotonic_millis() - started, False)
            raise
        self._metrics.timing("Fetcher", "GetRecords", self._clock.monotonic_millis() - started, True)
        self._metrics.count("Fetcher", "StreamReadRequests", 1, shard_id=self.shard_id)
        return result.records, result.millis_behind_latest, result.next_iterator

    def _deliver(self, now: int) -> int:
        pending = self._pending
        assert pending is not None
        # After a failure, deliver only what the processor has not checkpointed yet.
        self._done.advance(floor_of(self.checkpointer.last_checkpoint))
        records = self._done.fresh(pending.records).records
        if records:
            self.checkpointer.delivered(records[-1].sequence_number)
        started = self._clock.monotonic_millis()
        try:
            self._processor.process_records(
                ProcessRecordsInput(
                    records,
                    self.checkpointer,
                    pending.millis_behind_latest,
                    self.shard,
                    self._should_stop,
                    self._lease_held,
                )
            )
        except LeaseLostError:
            raise
        except Exception as exc:
            pending.failures += 1
            delay = self._backoff()
            self._metrics.count("ProcessTask", "RecordsRetried", len(records), shard_id=self.shard_id)
            log.error(
                "shard %s: processor failed on %d records (attempt %d): %r; delivering them again in %d ms",
                self.shard_id,
                len(records),
                pending.failures,
                exc,
                delay,
            )
            return now + delay
        elapsed = self._clock.monotonic_millis() - started
        self._metrics.timing("ProcessTask", "RecordProcessor.processRecords", elapsed, True)
        self._metrics.count("ProcessTask", "RecordsProcessed", len(records), shard_id=self.shard_id)
        self._metrics.count("ProcessTask", "DataBytesProcessed", size_bytes(records), "Bytes", self.shard_id)
        self._metrics.gauge(
            "ProcessTask", "MillisBehindLatest", pending.millis_behind_latest, "Milliseconds", self.shard_id
        )
        self.records_delivered += len(records)
        self._pending = None
        if pending.malformed:
            # Read again from just after what was delivered: the read stops at the malformed record.
            self._iterator = None
            self._go(ShardEvent.BATCH)
            return now
        self._backoff_failures = 0
        return self._advance(
            pending.next_iterator,
            now,
            records=len(pending.records),
            full=len(pending.records) >= self._settings.max_records,
            behind=pending.millis_behind_latest,
        )

    def _trimmed(self, exc: TrimmedDataError | ShardNotFoundError, now: int) -> int:
        """Data gone before it was read, from GetShardIterator or GetRecords: never a silent skip.

        Trimmed records: an ERROR and a metric every time; ``on_trimmed=skip_to_trim_horizon``
        resumes at the oldest record left, ``fail`` keeps retrying (the shard is stuck until an
        operator acts). A shard that no longer exists at all (closed and trimmed away) is only taken
        for gone once it has stayed missing for three shard-sync intervals, so a child that
        DescribeStream lists before GetShardIterator knows it is not mistaken for one; then, with
        ``skip_to_trim_horizon``, it is finished (SHARD_END) so its children can start.
        """
        if isinstance(exc, ShardNotFoundError):
            self._gone_since = now if self._gone_since is None else self._gone_since
            if now - self._gone_since < 3 * self._settings.shard_sync_interval_millis:
                raise exc  # retried with back-off; maybe not visible yet
        self._metrics.count("Fetcher", "RecordsTrimmedLost", 1, shard_id=self.shard_id)
        log_trimmed_loss(log, self.shard_id, self._resume_position(), str(exc), self._settings.on_trimmed)
        if self._settings.on_trimmed != "skip_to_trim_horizon":
            raise exc
        if isinstance(exc, ShardNotFoundError):
            self._iterator = None
            return self._advance(None, now, records=0, full=False, behind=0)
        self._iterator = self._reader.iterator_at(self.shard_id, TRIM_HORIZON)
        if self.life.state is ShardState.INITIALIZING:
            self._go(ShardEvent.INITIALIZED)
        return now

    def _advance(self, next_iterator: str | None, now: int, *, records: int, full: bool, behind: int) -> int:
        self._iterator = next_iterator
        if next_iterator is None:
            self.checkpointer.at_shard_end = True
            self._go(ShardEvent.SHARD_END)
            return now
        self._go(ShardEvent.BATCH)
        self._empty_polls = 0 if records else self._empty_polls + 1
        return now + next_read_delay(
            self._settings,
            records=records,
            full=full,
            behind_millis=behind,
            empty_polls=self._empty_polls,
            since_read_started=now - self._read_started,
        )

    def _shut_down(self, now: int) -> int | None:
        """Tell the processor why it stops (if it was initialized), then finish the lease's part.

        A processor method that raises — a throttled checkpoint in ``shard_ended`` or
        ``shutdown_requested``, say — leaves the consumer SHUTTING_DOWN and the step is retried with
        back-off by :meth:`step`, while the lease is held: the checkpoint stays where the processor
        put it (never past a record it did not finish) and nothing is lost. ``LeaseLostError`` turns
        the shutdown into LEASE_LOST: no checkpoint any more. ``lease_lost`` raising is logged only:
        the lease is gone whatever the processor does.
        """
        reason = self.life.reason
        if not self._processor_stopped:
            if reason is ShutdownReason.SHARD_END:  # only ever reached after initialize
                if not self._shard_end_checkpointed():
                    return now + self._backoff()
            elif reason is ShutdownReason.LEASE_LOST:
                self._stop_lease_lost()
            elif self._initialized:
                self._processor.shutdown_requested(
                    ShutdownRequestedInput(self.shard, self.checkpointer, self._should_stop)
                )
            else:
                log.info("shard %s: stopped before the processor was initialized", self.shard_id)
            self._processor_stopped = True
        if reason is ShutdownReason.SHARD_END:
            if self._on_shard_end is not None:
                self._on_shard_end(self.shard_id)
        elif reason is ShutdownReason.REQUESTED:
            self._release()
        self._go(ShardEvent.SHUTDOWN_DONE)
        return None

    def _shard_end_checkpointed(self) -> bool:
        """Have the processor checkpoint SHARD_END (once: not again after it did and then raised)."""
        if self._already_ended or self.checkpointer.last_checkpoint == SHARD_END:
            return True
        self._processor.shard_ended(ShardEndedInput(self.shard, self.checkpointer, self._should_stop))
        if self.checkpointer.last_checkpoint == SHARD_END:
            return True
        log.error(
            "shard %s: the processor did not checkpoint SHARD_END in shard_ended; its children "
            "stay blocked until it does (retrying)",
            self.shard_id,
        )
        return False

    def _release(self) -> None:
        try:
            self._leases.release(self.shard_id, self._counter)
        except LeaseLostError:
            log.info("shard %s: nothing to release: the lease is another worker's already", self.shard_id)

    def _stop_lease_lost(self) -> None:
        self._metrics.count("ShutdownTask", "ShutdownsLeaseLost", 1, shard_id=self.shard_id)
        log_lease_lost_shutdown(log, self.shard_id)
        if not self._initialized:
            return  # a processor never initialized is not told anything
        try:
            self._processor.lease_lost(LeaseLostInput(self.shard))
        except Exception as exc:
            log.error(
                "shard %s: the processor's lease_lost failed: %r; shutting it down anyway (the lease is gone)",
                self.shard_id,
                exc,
                exc_info=exc,
            )

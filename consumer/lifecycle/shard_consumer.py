"""One shard's consumer: runs the lifecycle of :mod:`consumer.lifecycle.states` one step at a time.

The scheduler calls :meth:`ShardConsumer.step` on a pool thread whenever the consumer is due, and
never runs two steps of one consumer at once; a step does one unit of work (check parents, fetch and
deliver one batch, shut down) and returns when it wants to run again. A blocked or idle shard is
therefore an entry in a timer heap, not a thread.

Nothing here moves a checkpoint by itself except at SHARD_END (where the processor must have
checkpointed) — progress is whatever the processor checkpointed through the
:class:`~consumer.lifecycle.checkpointer.ShardCheckpointer`. A batch the processor fails on is
delivered again (from just after its last checkpoint) after a back-off: never skipped.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

from consumer.clock import Clock
from consumer.leases.errors import LeaseLostError
from consumer.lifecycle.checkpointer import ShardCheckpointer
from consumer.lifecycle.ports import (
    SHARD_END,
    TRIM_HORIZON,
    DataTrimmedError,
    IteratorExpiredError,
    LeaseOps,
    ReadError,
    ShardGoneError,
    ShardProcessor,
    StreamGoneError,
    StreamReader,
)
from consumer.lifecycle.states import Lifecycle, ShardEvent, ShardState, ShutdownReason
from consumer.records import ShardInfo, StreamRecord
from consumer.settings import WorkerSettings
from consumer.telemetry.catalogue import log_lease_lost_shutdown, log_trimmed_loss
from consumer.telemetry.context import shard_context
from consumer.telemetry.metrics import Metrics, NullMetrics

log = logging.getLogger("consumer.lifecycle")


@dataclass
class _Pending:
    """A batch the processor has not finished yet (delivered again until it succeeds)."""

    records: tuple[StreamRecord, ...]
    millis_behind_latest: int
    next_iterator: str | None
    failures: int = 0


class ShardConsumer:
    def __init__(
        self,
        shard: ShardInfo,
        checkpoint: str,
        *,
        leases: LeaseOps,
        reader: StreamReader,
        processor: ShardProcessor,
        settings: WorkerSettings,
        clock: Clock,
        metrics: Metrics | None = None,
        on_shard_end: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.shard = shard
        self.life = Lifecycle()
        self._leases = leases
        self._reader = reader
        self._processor = processor
        self._settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._on_shard_end = on_shard_end
        self._rng = rng or random.Random()
        self.checkpointer = ShardCheckpointer(shard.shard_id, leases, checkpoint)
        self._iterator: str | None = None
        self._gone_since: int | None = None
        self._pending: _Pending | None = None
        self._backoff_failures = 0
        self._already_ended = False
        self._shutdown_requested = threading.Event()
        self._lease_lost = threading.Event()
        self.records_delivered = 0

    # ----------------------------------------------------------------------- signals (any thread)

    def request_shutdown(self) -> None:
        self._shutdown_requested.set()

    def lease_lost(self) -> None:
        self._lease_lost.set()

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
            or not self._leases.may_process(self.shard.shard_id)
        )

    def _lease_held(self) -> bool:
        return not self._lease_lost.is_set() and self._leases.may_process(self.shard.shard_id)

    @property
    def shard_id(self) -> str:
        return self.shard.shard_id

    @property
    def finished(self) -> bool:
        return self.life.finished

    # -------------------------------------------------------------------------- the step

    def step(self) -> int | None:
        """Do one unit of work; return the monotonic time (ms) to run again, or None when done."""
        with shard_context(self.shard_id):
            return self._step()

    def _step(self) -> int | None:
        now = self._clock.monotonic_millis()
        if self.life.state is not ShardState.SHUTTING_DOWN and not self.life.finished:
            if self._lease_lost.is_set() or not self._leases.may_process(self.shard_id):
                self._go(ShardEvent.LEASE_LOST)
            elif self._shutdown_requested.is_set() or self._leases.handoff_requested(self.shard_id):
                self._go(ShardEvent.SHUTDOWN_REQUESTED)
        try:
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
        except LeaseLostError:
            if self.life.state is not ShardState.SHUTDOWN_COMPLETE:
                self._go(ShardEvent.LEASE_LOST)
            return now
        except StreamGoneError:
            raise
        except ReadError as exc:
            delay = self._backoff()
            log.warning("shard %s: %s; retrying in %d ms", self.shard_id, exc, delay)
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

    def _backoff(self) -> int:
        """Exponential back-off with full jitter, from task_backoff_time_millis up to 30 s."""
        self._backoff_failures += 1
        ceiling = min(30_000, self._settings.task_backoff_time_millis * 2 ** min(self._backoff_failures, 10))
        return max(self._settings.task_backoff_time_millis, int(self._rng.uniform(0, ceiling)))

    # ------------------------------------------------------------------------ the states

    def _wait_for_parents(self, now: int) -> int:
        pending = [p for p in self.shard.parent_shard_ids if not self._leases.is_shard_finished(p)]
        if pending:
            self._metrics.count("BlockOnParentShardTask", "ShardsBlockedOnParent", 1, shard_id=self.shard_id)
            self._go(ShardEvent.PARENTS_PENDING)
            return now + self._settings.parent_shard_poll_interval_millis
        self._go(ShardEvent.PARENTS_DONE)
        return now

    def _initialize(self, now: int) -> int:
        start = self.checkpointer.last_checkpoint
        self._processor.initialize(self.shard, start)
        if start == SHARD_END:
            # Finished before we got it (a previous owner checkpointed SHARD_END): nothing to read.
            self.checkpointer.at_shard_end = True
            self._already_ended = True
            self._go(ShardEvent.SHARD_END)
            return now
        try:
            self._iterator = self._reader.iterator_at(self.shard_id, start)
        except (DataTrimmedError, ShardGoneError) as exc:
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
            except (DataTrimmedError, ShardGoneError) as exc:
                return self._trimmed(exc, now)
            if fetched is None:
                return now  # a new iterator was acquired: fetch again at once
            records, behind, next_iterator = fetched
            if not records and not self._settings.call_process_records_even_for_empty_record_list:
                return self._advance(next_iterator, now, full=False)
            self._pending = _Pending(records, behind, next_iterator)
        return self._deliver(now)

    def _fetch(self) -> tuple[tuple[StreamRecord, ...], int, str | None] | None:
        if self._iterator is None:
            self._iterator = self._reader.iterator_at(self.shard_id, self._resume_position())
        started = self._clock.monotonic_millis()
        try:
            result = self._reader.fetch(self.shard_id, self._iterator, self._settings.max_records)
        except IteratorExpiredError:
            self._metrics.count("Fetcher", "ExpiredIterator", 1, shard_id=self.shard_id)
            log.info(
                "shard %s: iterator expired; re-acquiring after %s", self.shard_id, self._resume_position()
            )
            self._iterator = None
            return None
        except (DataTrimmedError, ShardGoneError):
            raise
        except ReadError:
            self._metrics.timing("Fetcher", "GetRecords", self._clock.monotonic_millis() - started, False)
            raise
        self._metrics.timing("Fetcher", "GetRecords", self._clock.monotonic_millis() - started, True)
        self._backoff_failures = 0
        self._gone_since = None
        return result.records, result.millis_behind_latest, result.next_iterator

    def _deliver(self, now: int) -> int:
        pending = self._pending
        assert pending is not None
        # After a failure, deliver only what the processor has not checkpointed yet.
        last = self.checkpointer.last_checkpoint
        records = pending.records
        if last.isdigit():
            records = tuple(r for r in records if int(r.sequence_number) > int(last))
        if records:
            self.checkpointer.delivered(records[-1].sequence_number)
        started = self._clock.monotonic_millis()
        try:
            self._processor.process(
                records, pending.millis_behind_latest, self.checkpointer, self._should_stop, self._lease_held
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
        self._metrics.count(
            "ProcessTask", "DataBytesProcessed", sum(r.size_bytes for r in records), "Bytes", self.shard_id
        )
        self._metrics.gauge(
            "ProcessTask", "MillisBehindLatest", pending.millis_behind_latest, "Milliseconds", self.shard_id
        )
        self.records_delivered += len(records)
        self._pending = None
        self._backoff_failures = 0
        return self._advance(
            pending.next_iterator, now, full=len(pending.records) >= self._settings.max_records
        )

    def _trimmed(self, exc: DataTrimmedError | ShardGoneError, now: int) -> int:
        """Data gone before it was read, from GetShardIterator or GetRecords: never a silent skip.

        Trimmed records: an ERROR and a metric every time; ``on_trimmed=skip_to_trim_horizon``
        resumes at the oldest record left, ``fail`` keeps retrying (the shard is stuck until an
        operator acts). A shard that no longer exists at all (closed and trimmed away) is only taken
        for gone once it has stayed missing for three shard-sync intervals, so a child that
        DescribeStream lists before GetShardIterator knows it is not mistaken for one; then, with
        ``skip_to_trim_horizon``, it is finished (SHARD_END) so its children can start.
        """
        if isinstance(exc, ShardGoneError):
            self._gone_since = now if self._gone_since is None else self._gone_since
            if now - self._gone_since < 3 * self._settings.shard_sync_interval_millis:
                raise exc  # retried with back-off; maybe not visible yet
        self._metrics.count("Fetcher", "RecordsTrimmedLost", 1, shard_id=self.shard_id)
        log_trimmed_loss(log, self.shard_id, self._resume_position(), str(exc), self._settings.on_trimmed)
        if self._settings.on_trimmed != "skip_to_trim_horizon":
            raise exc
        if isinstance(exc, ShardGoneError):
            self._iterator = None
            return self._advance(None, now, full=False)
        self._iterator = self._reader.iterator_at(self.shard_id, TRIM_HORIZON)
        if self.life.state is ShardState.INITIALIZING:
            self._go(ShardEvent.INITIALIZED)
        return now

    def _advance(self, next_iterator: str | None, now: int, *, full: bool) -> int:
        self._iterator = next_iterator
        if next_iterator is None:
            self.checkpointer.at_shard_end = True
            self._go(ShardEvent.SHARD_END)
            return now
        self._go(ShardEvent.BATCH)
        # A full batch means more is waiting: read again at once; otherwise poll after the idle time.
        return now if full else now + self._settings.idle_time_between_reads_millis

    def _shut_down(self, now: int) -> int | None:
        reason = self.life.reason
        if reason is ShutdownReason.SHARD_END:
            if not self._already_ended:
                self._processor.shard_ended(self.checkpointer)
                if self.checkpointer.last_checkpoint != SHARD_END:
                    log.error(
                        "shard %s: the processor did not checkpoint SHARD_END in shard_ended; its children "
                        "stay blocked until it does (retrying)",
                        self.shard_id,
                    )
                    return now + self._backoff()
            if self._on_shard_end is not None:
                self._on_shard_end(self.shard_id)
        elif reason is ShutdownReason.LEASE_LOST:
            self._metrics.count("ShutdownTask", "ShutdownsLeaseLost", 1, shard_id=self.shard_id)
            log_lease_lost_shutdown(log, self.shard_id)
            self._processor.lease_lost()
        else:
            self._processor.shutdown_requested(self.checkpointer)
            self._leases.release(self.shard_id)
        self._go(ShardEvent.SHUTDOWN_DONE)
        return None

"""Run a function-form handler over records with retries, bisection and dead letters.

The rule that makes this safe: the checkpoint only ever moves to just before the first record that
is not finished, where *finished* means the handler succeeded on it, or it was filtered out, or it
is durable in the dead letter. Everything else is retried, in order:

* a failing span of more than one record is split (``bisect_on_error``; splitting does not use up
  attempts), so a poison record ends up alone and its neighbours succeed: in two when the handler
  raised, or where the handler's answer says (each record it names alone, the runs between them as
  they are), so a record the handler reported done is delivered again once, after the failure
  before it, and not once per halving;
* a single failing span is retried after an exponential, jittered back-off slept on the injected
  clock in short slices, so ``should_stop`` (lease lost, shutdown) interrupts it;
* it goes to the dead letter when the error is non-retryable, the attempts are used up or its
  record is older than ``max_record_age_seconds`` — and only if a dead letter is configured. With
  none (the default) it is retried until an operator acts, with an ERROR log and a metric on every
  attempt naming the stuck shard, the record and the error.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from consumer.processing.api import Batch, BatchHandler, BatchResult
from consumer.processing.dead_letter import DeadLetter, FailedRecords
from consumer.processing.errors import (
    DeadLetterError,
    HandlerStoppedError,
    LeaseLostError,
    PartialBatchFailureError,
)
from consumer.processing.retry import RetryPolicy
from consumer.processing.runner import Delivery, RunnerEvents, keep_every_record
from consumer.records import ShardInfo, StreamRecord
from consumer.telemetry.catalogue import log_retries_exhausted
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.settings import DEFAULT_BATCH_SIZE

log = logging.getLogger("consumer.processing")
OPERATION = "ProcessTask"
SLEEP_SLICE_MILLIS = 250


def created_seconds(record: StreamRecord) -> float:
    """The record's creation time, 0 when it does not read: a figure must never fail a batch the
    handler already finished (it would be delivered again, forever), and a failing record whose age
    is unknown is not too old (``RetryPolicy.too_old``): its attempts decide."""
    try:
        return record.approximate_creation_time
    except (TypeError, ValueError):
        return 0.0


def record_end_to_end_lag(metrics: Metrics, oldest: StreamRecord, now_millis: int, shard_id: str) -> None:
    """``EndToEndLag``: the record that waited longest of a handled call, written -> handled (none
    for a record without a readable creation time)."""
    created = created_seconds(oldest)
    if created > 0:
        lag = max(0.0, now_millis - created * 1000)
        metrics.gauge(OPERATION, "EndToEndLag", lag, "Milliseconds", shard_id)


def split_at(records: tuple[StreamRecord, ...], named: Sequence[int]) -> list[tuple[StreamRecord, ...]]:
    """``records`` cut around the indices ``named`` (sorted): each named record alone, the runs
    between them whole, in order."""
    pieces: list[tuple[StreamRecord, ...]] = []
    start = 0
    for index in named:
        if index > start:
            pieces.append(records[start:index])
        pieces.append(records[index : index + 1])
        start = index + 1
    if start < len(records):
        pieces.append(records[start:])
    return pieces


@dataclass(frozen=True)
class _Span:
    records: tuple[StreamRecord, ...]
    attempts: int = 0


class FailurePolicyRunner(RunnerEvents):
    """The serial path: one flush's records through the handler under the failure policy."""

    def __init__(
        self,
        handler: BatchHandler,
        policy: RetryPolicy,
        clock: Clock,
        *,
        dead_letter: DeadLetter | None = None,
        metrics: Metrics | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        lane: int = 0,
        lanes: int = 1,
    ) -> None:
        self._handler = handler
        self._policy = policy
        self._clock = clock
        self._dead_letter = dead_letter
        self._metrics = metrics or NullMetrics()
        self._batch_size = batch_size
        self._lane = lane
        self._lanes = lanes

    @property
    def handler(self) -> BatchHandler:
        return self._handler

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def for_lane(self, lane: int, lanes: int) -> FailurePolicyRunner:
        """The same policy for one lane of ``lanes`` (:mod:`consumer.processing.lanes`): its batches
        say which lane they are. Runs of different lanes share no state (the handler aside)."""
        return FailurePolicyRunner(
            self._handler,
            self._policy,
            self._clock,
            dead_letter=self._dead_letter,
            metrics=self._metrics,
            batch_size=self._batch_size,
            lane=lane,
            lanes=lanes,
        )

    def run(self, delivery: Delivery) -> bool:
        """Process ``delivered`` (those ``keep`` accepts); True when all are finished and checkpointed.

        False means ``should_stop`` interrupted: the checkpoint is just before the first unfinished
        record. ``LeaseLostError`` from ``checkpoint`` propagates (stop, never retry).
        """
        shard, delivered, keep, checkpoint, should_stop = delivery.parts()
        if not delivered:
            return True
        kept = tuple(delivered) if keep is keep_every_record else tuple(r for r in delivered if keep(r))
        spans = deque(_Span(kept[i : i + self._batch_size]) for i in range(0, len(kept), self._batch_size))
        # Each record's predecessor, built only when a span ends before the last record (a batch of
        # one span that succeeds, the usual case, never needs it).
        previous: dict[str, str] = {}

        def checkpoint_before_next() -> None:
            if not spans:
                checkpoint(delivered[-1].position)
                return
            if not previous:
                previous.update((r.position, delivered[i - 1].position) for i, r in enumerate(delivered) if i)
            first = spans[0].records[0].position
            if first in previous:
                checkpoint(previous[first])

        if not spans:
            checkpoint(delivered[-1].position)  # everything was filtered out
        while spans:
            if should_stop():
                return False
            span = spans[0]
            try:
                error, failed = self._attempt(
                    shard, span.records, delivery.millis_behind_latest, should_stop, delivery.lease_held
                )
            except HandlerStoppedError:
                return False
            if error is None:
                spans.popleft()
                checkpoint_before_next()
                continue
            if failed and failed[0]:
                span = _Span(span.records[failed[0] :], span.attempts)
                spans[0] = span
                checkpoint_before_next()
            if failed and self._policy.bisect_on_error and len(span.records) > 1:
                spans.popleft()
                pieces = split_at(span.records, [index - failed[0] for index in failed])
                spans.extendleft(_Span(piece, span.attempts) for piece in reversed(pieces))
                self._metrics.count(OPERATION, "RecordsRetried", len(span.records), shard_id=shard.shard_id)
                log.warning(
                    "shard %s: %d records failed (%r); retrying each reported failure alone",
                    shard.shard_id,
                    len(span.records),
                    error,
                )
                continue
            if self._policy.bisect_on_error and len(span.records) > 1:
                middle = len(span.records) // 2
                spans[0] = _Span(span.records[middle:], span.attempts)
                spans.appendleft(_Span(span.records[:middle], span.attempts))
                self._metrics.count(OPERATION, "RecordsRetried", len(span.records), shard_id=shard.shard_id)
                log.warning(
                    "shard %s: %d records failed (%r); bisecting to isolate the failing record",
                    shard.shard_id,
                    len(span.records),
                    error,
                )
                continue
            attempts = span.attempts + 1
            if self._gives_up(span, error, attempts):
                if not self._send_to_dead_letter(shard, span, error, attempts, should_stop):
                    return False
                spans.popleft()
                checkpoint_before_next()
                continue
            spans[0] = _Span(span.records, attempts)
            if not self._wait_before_retry(shard, span, error, attempts, should_stop):
                return False
        return True

    # -------------------------------------------------------------------------------- helpers

    def _attempt(
        self,
        shard: ShardInfo,
        records: tuple[StreamRecord, ...],
        behind: int,
        should_stop: Callable[[], bool],
        lease_held: Callable[[], bool],
    ) -> tuple[BaseException | None, tuple[int, ...]]:
        """Call the handler once: (None, ()) on success, else (error, the indices of the records
        the handler's answer named failed, in order; () when the whole call failed)."""
        try:
            result = self._handler(
                Batch(shard, records, behind, should_stop, lease_held, lane=self._lane, lanes=self._lanes)
            )
        except (LeaseLostError, HandlerStoppedError):
            raise
        except Exception as exc:
            return exc, ()
        failed = self._failed_indices(records, result)
        done = records if failed is None else records[: failed[0] if failed else 0]
        self._count_processed(shard, done)
        if failed is None:
            return None, ()
        assert result is not None
        numbers = ", ".join(result.failed_sequence_numbers[:5])
        reason = result.error or "the handler reported them failed"
        return PartialBatchFailureError(f"records {numbers} failed: {reason}"), failed

    @staticmethod
    def _failed_indices(
        records: tuple[StreamRecord, ...], result: BatchResult | None
    ) -> tuple[int, ...] | None:
        """None: all succeeded; else the indices of the records named failed (() for a whole failure)."""
        if result is None or not result.failed_sequence_numbers:
            return None
        failed = set(result.failed_sequence_numbers)
        # A Kinesis user record is named by its sequence number (all of its aggregate's user records:
        # Lambda's batchItemFailures know no sub-sequence) or by its position (that user record).
        named = tuple(
            index
            for index, record in enumerate(records)
            if record.sequence_number in failed or record.position in failed
        )
        # A failure naming no record of the batch is a handler bug: treat the whole batch as failed.
        return named

    def _elapsed(self, started: int) -> int:
        return self._clock.monotonic_millis() - started

    def _count_processed(self, shard: ShardInfo, records: tuple[StreamRecord, ...]) -> None:
        if not records:
            return
        # RecordsProcessed, DataBytesProcessed and RecordProcessor.processRecords.Time are counted once
        # by the lifecycle (KCL's ProcessTask: records handed to the processor that returned normally).
        sid = shard.shard_id
        now = self._clock.wall_millis()
        created = created_seconds(records[-1])
        if created > 0:
            latency = max(0.0, now - created * 1000)
            self._metrics.gauge(OPERATION, "ProcessLatency", latency, "Milliseconds", sid)
        record_end_to_end_lag(self._metrics, records[0], now, sid)

    def _gives_up(self, span: _Span, error: BaseException, attempts: int) -> bool:
        if self._dead_letter is None:
            return False
        if not self._policy.is_retryable(error) or self._policy.exhausted(attempts):
            return True
        return self._policy.too_old(created_seconds(span.records[0]), self._clock.wall_millis())

    def _send_to_dead_letter(
        self,
        shard: ShardInfo,
        span: _Span,
        error: BaseException,
        attempts: int,
        should_stop: Callable[[], bool],
    ) -> bool:
        assert self._dead_letter is not None
        failed = FailedRecords(shard, span.records, error, attempts)
        tries = 0
        while True:
            try:
                self._dead_letter.send(failed)
                break
            except DeadLetterError as exc:
                tries += 1
                delay = self._policy.backoff_millis(tries)
                log.error(
                    "shard %s stuck: cannot dead-letter records %s..%s (%s); retrying in %d ms",
                    shard.shard_id,
                    span.records[0].position,
                    span.records[-1].position,
                    exc,
                    delay,
                )
                if not self._sleep(delay, should_stop):
                    return False
        self._metrics.count(OPERATION, "RecordsSentToDeadLetter", len(span.records), shard_id=shard.shard_id)
        log_retries_exhausted(
            log,
            shard.shard_id,
            len(span.records),
            attempts,
            self._dead_letter.description,
            first_sequence_number=span.records[0].position,
            last_sequence_number=span.records[-1].position,
            error=f"{failed.error_type}: {failed.error_message}",
        )
        return True

    def _wait_before_retry(
        self,
        shard: ShardInfo,
        span: _Span,
        error: BaseException,
        attempts: int,
        should_stop: Callable[[], bool],
    ) -> bool:
        delay = self._policy.backoff_millis(attempts)
        self._metrics.count(OPERATION, "RecordsRetried", len(span.records), shard_id=shard.shard_id)
        why = self._why_retried(error)
        log.error(
            "shard %s stuck at sequence number %s (%d records) after %d attempts: %r (%s); retrying in %d ms",
            shard.shard_id,
            span.records[0].position,
            len(span.records),
            attempts,
            error,
            why,
            delay,
        )
        return self._sleep(delay, should_stop)

    def _why_retried(self, error: BaseException) -> str:
        if self._dead_letter is None:
            return "no processing.dead_letter is configured, so it is retried until an operator acts"
        if not self._policy.is_retryable(error):
            return "non-retryable"
        return f"max_retry_attempts={self._policy.max_retry_attempts}"

    def _sleep(self, millis: int, should_stop: Callable[[], bool]) -> bool:
        """Sleep in slices; False as soon as ``should_stop`` says so."""
        remaining = millis
        while remaining > 0:
            if should_stop():
                return False
            step = min(remaining, SLEEP_SLICE_MILLIS)
            self._clock.sleep(step)
            remaining -= step
        return not should_stop()

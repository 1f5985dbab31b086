"""The function form as a :class:`~consumer.processing.api.RecordProcessor`.

It buffers what the lifecycle delivers (``processing.batching``: up to N records or T ms per shard,
the reason ``call_process_records_even_for_empty_record_list`` exists — an empty call is what lets a
quiet shard flush on time), filters, runs the handler under the failure policy, and checkpoints
only what a flush finished. Buffered records are never checkpointed, so a crash before the flush
makes the next owner read them again.

It keeps no redelivery filter of its own: the shard consumer hands a batch again only after
``process_records`` raised, cut to what is after the checkpoint (the one rule,
:mod:`consumer.processing.redelivery`). So a call that raises takes its records back out of the
buffer before it raises — the redelivery puts them in again, once — and a call that returns keeps
them (they are never delivered again). A handler that keeps state per shard
(:class:`~consumer.processing.api.ShardScoped`) is told when the shard starts and stops here.

The runner is the failure policy itself (the serial path), or the same spread over lanes
(:mod:`consumer.processing.lanes`, ``parallelization_factor`` > 1: a flush returns when every lane
has stopped), or parks failing keys (:mod:`consumer.processing.key_parking`, ``on_failure:
park_key``: a flush returns with their records unfinished, kept in the buffer and handed back with
the next flush, until shard end drains them), or run window by window with the state saved before each checkpoint
(:mod:`consumer.processing.windows`, ``tumbling_window_seconds`` > 0: the state is loaded at
``initialize``, the window closed on an idle caught-up poll and at shard end).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from consumer.leases.errors import LeaseError, LeaseLostError
from consumer.processing.api import (
    Batch,
    BatchResult,
    Checkpointer,
    GapInput,
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ReloadedInput,
    ShardEndedInput,
    ShardScoped,
    ShutdownRequestedInput,
    _always,
)
from consumer.processing.errors import ProcessingError
from consumer.processing.filters import RecordFilter
from consumer.processing.runner import BatchRunner, Delivery, keep_every_record
from consumer.records import ShardInfo, StreamRecord
from ground.clock import Clock
from ground.positions import ordinal
from ground.settings import DEFAULT_BATCH_SIZE

log = logging.getLogger("consumer.processing")


def shard_hooks(handler: object) -> ShardScoped | None:
    """The handler's per-shard hooks: on the handler itself, or on the object whose ``handle`` it is."""
    for candidate in (handler, getattr(handler, "__self__", None)):
        if isinstance(candidate, ShardScoped):
            return candidate
    return None


class FunctionProcessor:
    # Its runners record EndToEndLag when they finish records (a return from process_records may
    # only have buffered them, or parked them), so the shard consumer leaves it to them.
    records_end_to_end_lag = True

    def __init__(
        self,
        runner: BatchRunner,
        clock: Clock,
        *,
        record_filter: RecordFilter | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_window_millis: int = 0,
    ) -> None:
        self._runner = runner
        self._clock = clock
        self._filter = record_filter or RecordFilter()
        # The runner's keep: with no filter, the marker that spares it asking about every record.
        self._keep = keep_every_record if self._filter.keeps_everything else self._filter.keeps
        self._batch_size = batch_size
        self._window = max_window_millis
        self._shard = ShardInfo("unknown")
        self._buffer: list[StreamRecord] = []
        self._kept = 0
        self._buffer_started: int | None = None
        self._unrecorded: str | None = None  # processed, but its checkpoint was refused for now
        # Finished beyond the checkpoint in earlier flushes (lanes, parked keys): once nothing before
        # one of them is unfinished, the checkpoint may move over it (_checkpoint_over_finished).
        self._beyond: dict[int, str] = {}
        self._hooks = shard_hooks(runner.handler)

    @property
    def buffered(self) -> tuple[StreamRecord, ...]:
        return tuple(self._buffer)

    def initialize(self, initialization: InitializationInput) -> None:
        self._shard = initialization.shard
        self._buffer.clear()
        self._kept = 0
        self._buffer_started = None
        self._unrecorded = None
        self._beyond.clear()
        self._runner.start(initialization.shard, initialization.checkpoint)
        if self._hooks is not None:
            self._hooks.shard_started(initialization.shard, initialization.checkpoint)

    def process_records(self, process: ProcessRecordsInput) -> None:
        self._shard = process.shard
        self._buffer.extend(process.records)
        try:
            self._kept += self._kept_of(process.records)
            if self._buffer and self._buffer_started is None:
                self._buffer_started = self._clock.monotonic_millis()
            if self._due():
                self._flush(
                    process.checkpointer,
                    process.should_stop,
                    process.millis_behind_latest,
                    process.lease_held,
                )
            if not self._buffer:
                self._runner.idle(process.shard, process.millis_behind_latest, process.should_stop)
        except LeaseLostError:
            raise  # nothing is delivered again to this processor: lease_lost drops the buffer
        except Exception:
            self._give_back(process)
            raise

    def _give_back(self, process: ProcessRecordsInput) -> None:
        """This call raised: the lifecycle delivers its unfinished records again, so drop them here.

        What the flush finished has left the buffer already; the rest of this call's records are
        at its end (one shard, in order). A checkpoint deferred by a throttled leases table is
        tried once more too: the redelivery starts after the recorded checkpoint, and records
        processed but not recorded would otherwise reach the handler a second time (if the table
        still refuses, they do: handlers are idempotent, and the changelog sink skips them).
        """
        if not process.records:
            return
        first = ordinal(process.records[0].position)
        self._buffer = [r for r in self._buffer if ordinal(r.position) < first]
        self._kept = self._kept_of(self._buffer)
        if not self._buffer:
            self._buffer_started = None
        if self._unrecorded is not None:
            try:
                process.checkpointer.checkpoint(self._unrecorded)
                self._unrecorded = None
            except LeaseError as exc:
                log.info("shard %s: deferred checkpoint still refused: %s", self._shard.shard_id, exc)

    def _kept_of(self, records: Sequence[StreamRecord]) -> int:
        """How many of ``records`` the filter lets through."""
        if self._keep is keep_every_record:
            return len(records)
        return sum(1 for record in records if self._filter.keeps(record))

    def _due(self) -> bool:
        if not self._buffer:
            return False
        if self._window == 0 or self._kept >= self._batch_size:
            return True
        assert self._buffer_started is not None
        return self._clock.monotonic_millis() - self._buffer_started >= self._window

    def _flush(
        self,
        checkpointer: Checkpointer,
        should_stop: Callable[[], bool],
        behind: int = 0,
        lease_held: Callable[[], bool] = _always,
        *,
        drain: bool = False,
    ) -> bool:
        if not self._buffer:
            return True
        done: list[str] = []
        ahead: set[str] = set()  # finished out of order (lanes), beyond what is checkpointed

        def ran_ahead(sequence_numbers: Sequence[str]) -> None:
            ahead.update(sequence_numbers)
            checkpointer.finished(sequence_numbers)

        def checkpoint(sequence_number: str) -> bool:
            """True when written; False when deferred (the runner's records are processed anyway)."""
            written = True
            try:
                checkpointer.checkpoint(sequence_number)
                self._unrecorded = None
            except LeaseLostError:
                raise
            except LeaseError as exc:
                # The records are processed; only their checkpoint waits (a throttled or timed-out
                # leases table). Processing them again would hand them to the handler twice: the next
                # checkpoint covers them, and a stop or shard end writes this one before it returns.
                log.info("shard %s: checkpoint %s deferred: %s", self._shard.shard_id, sequence_number, exc)
                self._unrecorded = sequence_number
                written = False
            done.append(sequence_number)
            return written

        try:
            finished = self._runner.run(
                Delivery(
                    self._shard,
                    tuple(self._buffer),
                    self._keep,
                    checkpoint,
                    should_stop,
                    millis_behind_latest=behind,
                    lease_held=lease_held,
                    finished=ran_ahead,
                    drain=drain,
                )
            )
        finally:
            # Even when the run raises or is interrupted: what it finished — up to the checkpoint,
            # and what lanes finished beyond it — must not reach the handler again.
            self._beyond.update((ordinal(n), n) for n in ahead)
            if done or ahead:
                last = ordinal(done[-1]) if done else -1
                if not ahead and self._buffer and ordinal(self._buffer[-1].position) <= last:
                    self._buffer = []  # the checkpoint covers the last record, so all (in order)
                else:
                    self._buffer = [
                        r for r in self._buffer if ordinal(r.position) > last and r.position not in ahead
                    ]
                self._kept = self._kept_of(self._buffer)
            self._buffer_started = self._clock.monotonic_millis() if self._buffer else None
        self._checkpoint_over_finished(checkpoint, done)
        return finished and not self._buffer

    def _checkpoint_over_finished(self, checkpoint: Callable[[str], bool], done: list[str]) -> None:
        """Move the checkpoint over records finished in earlier flushes beyond it, up to the first
        record still buffered (unfinished).

        A runner checkpoints within the records it is handed; records it finished beyond a parked
        key's record in an earlier flush have left the buffer, so when that record is finished at
        last only this knows the checkpoint may pass them too. Every delivered record before the
        first buffered one is checkpointed, or one of these."""
        if done:
            last = ordinal(done[-1])
            self._beyond = {n: s for n, s in self._beyond.items() if n > last}
        if not self._beyond:
            return
        limit = ordinal(self._buffer[0].position) if self._buffer else None
        below = [n for n in self._beyond if limit is None or n < limit]
        if below:
            target = max(below)
            checkpoint(self._beyond[target])
            self._beyond = {n: s for n, s in self._beyond.items() if n > target}

    # ------------------------------------------------- worker.on_trimmed=reload (docs/processing.md)

    def gap(self, gap: GapInput) -> None:
        """The handler's marker batch (no records, ``batch.gap``). Before a reload, what is
        buffered from before the gap is handled first: the reload may not overtake it."""
        event = gap.event
        if event.phase == "gap" and not self._flush(
            gap.checkpointer, gap.should_stop, lease_held=gap.lease_held
        ):
            raise ProcessingError(
                f"shard {event.shard.shard_id}: {len(self._buffer)} record(s) from before the gap are "
                "not handled yet; the reload waits for them"
            )
        self._hand_over(
            Batch(event.shard, (), should_stop=gap.should_stop, lease_held=gap.lease_held, gap=event)
        )

    def process_reloaded(self, reloaded: ReloadedInput) -> None:
        """A page of re-loaded records, straight to the handler (``batch.reload``), filtered but not
        buffered, retried or dead-lettered: raising delivers the page again."""
        records = tuple(r for r in reloaded.records if self._keep is keep_every_record or self._keep(r))
        self._hand_over(
            Batch(
                reloaded.shard,
                records,
                should_stop=reloaded.should_stop,
                lease_held=reloaded.lease_held,
                reload=reloaded.gap,
            )
        )

    def _hand_over(self, batch: Batch) -> None:
        handler = self._runner.handler
        if not callable(handler):
            raise ProcessingError("the handler cannot be called with a reload's batch")
        result = handler(batch)
        if isinstance(result, BatchResult) and result.failed_sequence_numbers:
            raise ProcessingError(
                f"shard {batch.shard_id}: the handler failed on {len(result.failed_sequence_numbers)} "
                f"re-loaded record(s) ({result.error or 'no reason given'}); the page is delivered again"
            )

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        # The next owner reads everything after the last checkpoint again: drop, never checkpoint.
        self._unrecorded = None
        self._beyond.clear()
        self._buffer.clear()
        self._kept = 0
        self._buffer_started = None
        self._stopped(lease_lost.shard)

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        if self._flush(shard_ended.checkpointer, shard_ended.should_stop, drain=True):
            self._runner.finish(shard_ended.shard, shard_ended.should_stop)  # a window's final call
            shard_ended.checkpointer.checkpoint_shard_end()
            self._unrecorded = None
            self._runner.forget(shard_ended.shard)
            self._stopped(shard_ended.shard)

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        self._flush(shutdown.checkpointer, shutdown.should_stop)
        if self._unrecorded is not None:
            # The lease is about to be handed on: its position must be recorded first (an error here
            # makes the lifecycle retry this step while the lease is held).
            shutdown.checkpointer.checkpoint(self._unrecorded)
            self._unrecorded = None
        self._stopped(shutdown.shard)

    def _stopped(self, shard: ShardInfo) -> None:
        """The ownership is over (the lifecycle calls nothing more): the handler drops its shard state."""
        self._runner.close()  # lanes: every lane has returned, process_records waits for all of them
        if self._hooks is not None:
            self._hooks.shard_stopped(shard)

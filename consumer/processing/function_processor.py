"""The function form as a :class:`~consumer.processing.api.RecordProcessor`.

It buffers what the lifecycle delivers (``processing.batching``: up to N records or T ms per shard,
the reason ``call_process_records_even_for_empty_record_list`` exists — an empty call is what lets a
quiet shard flush on time), filters, runs the handler under the failure policy, and checkpoints
only what a flush finished. Buffered records are never checkpointed, so a crash before the flush
makes the next owner read them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from consumer.clock import Clock
from consumer.leases.errors import LeaseError, LeaseLostError
from consumer.processing.api import (
    Checkpointer,
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
    _always,
)
from consumer.processing.failure_policy import FailurePolicyRunner
from consumer.processing.filters import RecordFilter
from consumer.records import ShardInfo, StreamRecord

log = logging.getLogger("consumer.processing")


class FunctionProcessor:
    def __init__(
        self,
        runner: FailurePolicyRunner,
        clock: Clock,
        *,
        record_filter: RecordFilter | None = None,
        max_buffered_records: int = 1000,
        max_window_millis: int = 0,
    ) -> None:
        self._runner = runner
        self._clock = clock
        self._filter = record_filter or RecordFilter()
        self._max_records = max_buffered_records
        self._window = max_window_millis
        self._shard = ShardInfo("unknown")
        self._buffer: list[StreamRecord] = []
        self._kept = 0
        self._buffer_started: int | None = None
        self._high_water = -1  # largest sequence number buffered or checkpointed (as an int)
        self._unrecorded: str | None = None  # processed, but its checkpoint was refused for now

    @property
    def buffered(self) -> tuple[StreamRecord, ...]:
        return tuple(self._buffer)

    def initialize(self, initialization: InitializationInput) -> None:
        self._shard = initialization.shard
        self._buffer.clear()
        self._kept = 0
        self._buffer_started = None
        start = initialization.checkpoint
        self._high_water = int(start) if start.isdigit() else -1

    def process_records(self, process: ProcessRecordsInput) -> None:
        self._shard = process.shard
        for record in process.records:
            number = int(record.sequence_number)
            if number <= self._high_water:
                continue  # delivered again after a failure upstream: already buffered or done
            self._high_water = number
            self._buffer.append(record)
            if self._filter.keeps(record):
                self._kept += 1
        if self._buffer and self._buffer_started is None:
            self._buffer_started = self._clock.monotonic_millis()
        if self._due():
            self._flush(
                process.checkpointer, process.should_stop, process.millis_behind_latest, process.lease_held
            )

    def _due(self) -> bool:
        if not self._buffer:
            return False
        if self._window == 0 or self._kept >= self._max_records:
            return True
        assert self._buffer_started is not None
        return self._clock.monotonic_millis() - self._buffer_started >= self._window

    def _flush(
        self,
        checkpointer: Checkpointer,
        should_stop: Callable[[], bool],
        behind: int = 0,
        lease_held: Callable[[], bool] = _always,
    ) -> bool:
        if not self._buffer:
            return True
        done: list[str] = []

        def checkpoint(sequence_number: str) -> None:
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
            done.append(sequence_number)

        finished = self._runner.run(
            self._shard,
            tuple(self._buffer),
            self._filter.keeps,
            checkpoint,
            should_stop,
            millis_behind_latest=behind,
            lease_held=lease_held,
        )
        if done:
            last = int(done[-1])
            self._buffer = [r for r in self._buffer if int(r.sequence_number) > last]
            self._kept = sum(1 for r in self._buffer if self._filter.keeps(r))
        self._buffer_started = self._clock.monotonic_millis() if self._buffer else None
        return finished and not self._buffer

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        # The next owner reads everything after the last checkpoint again: drop, never checkpoint.
        self._unrecorded = None
        self._buffer.clear()
        self._kept = 0
        self._buffer_started = None

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        if self._flush(shard_ended.checkpointer, shard_ended.should_stop):
            shard_ended.checkpointer.checkpoint_shard_end()
            self._unrecorded = None

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        self._flush(shutdown.checkpointer, shutdown.should_stop)
        if self._unrecorded is not None:
            # The lease is about to be handed on: its position must be recorded first (an error here
            # makes the lifecycle retry this step while the lease is held).
            shutdown.checkpointer.checkpoint(self._unrecorded)
            self._unrecorded = None

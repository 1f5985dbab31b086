"""What a shard's consumer does about data trimmed before it was read (``worker.on_trimmed``).

A part of :class:`~consumer.lifecycle.shard_machine.ShardMachine` kept in its own module: the loss
is reported every time (``TrimmedLoss``); ``fail`` retries (stuck until an operator acts),
``skip_to_trim_horizon`` goes on at the oldest record left, and ``reload`` goes on there too, but
only after a reload of the whole table (:mod:`consumer.lifecycle.reload_run`) has been delivered
ahead of the shard's first readable batch, which the machine holds meanwhile as its pending batch.
"""

from __future__ import annotations

from collections import deque

from consumer.lifecycle.failures import Backoff
from consumer.lifecycle.reload_run import (
    DeliverReload,
    Paced,
    ReloadRequest,
    ReloadRun,
    ReloadStarted,
    Scanned,
    ScanPage,
    StartReload,
)
from consumer.lifecycle.shard_actions import (
    GetIterator,
    Note,
    Outcome,
    Pending,
    Request,
    TrimmedLoss,
    Wait,
)
from consumer.records import StreamRecord
from consumer.records.errors import RecordFormatError
from consumer.streams.errors import ShardNotFoundError, TrimmedDataError
from ground.positions import TRIM_HORIZON
from ground.settings import WorkerSettings


class ShardGaps:
    """The machine's methods for trimmed data (mixed into :class:`ShardMachine`, which declares
    these attributes as its fields and defines the two methods it shares with them)."""

    settings: WorkerSettings
    gone_since: int | None
    gap_from: str | None
    gap_gone: bool
    reload: ReloadRun | None
    last_created: float | None
    pending: Pending | None
    backoff: Backoff
    _notes: deque[Note]

    @property
    def resume_position(self) -> str:
        raise NotImplementedError

    def _retry(self, error: Exception, now: int) -> Wait:
        raise NotImplementedError

    def _advance(self, next_iterator: str | None, now: int, *, records: int, full: bool, behind: int) -> Wait:
        raise NotImplementedError

    def _trimmed(self, error: TrimmedDataError | ShardNotFoundError, now: int) -> Request | Wait:
        """Data gone before it was read, from GetShardIterator or GetRecords: never a silent skip.

        A loss is reported every time; ``on_trimmed=skip_to_trim_horizon`` resumes at the oldest
        record left, ``reload`` too after a reload (:meth:`_reload_before`), ``fail`` keeps retrying
        (stuck until an operator acts). A shard missing altogether (closed and trimmed away) counts
        as gone only after three shard-sync intervals (a child DescribeStream lists before
        GetShardIterator knows it is no such thing); then, unless ``fail``, it is finished
        (SHARD_END, after the reload) so its children can start."""
        if isinstance(error, ShardNotFoundError):
            self.gone_since = now if self.gone_since is None else self.gone_since
            if now - self.gone_since < 3 * self.settings.shard_sync_interval_millis:
                return self._retry(error, now)  # maybe not visible yet
        self._notes.append(TrimmedLoss(self.resume_position, error, self.settings.on_trimmed))
        if self.settings.on_trimmed == "fail":
            return self._retry(error, now)
        if self.settings.on_trimmed == "reload" and self.gap_from is None:
            self.gap_from = self.resume_position
        if isinstance(error, ShardNotFoundError):
            if self.gap_from is not None:
                self.gap_gone = True
                self._reload_before((), now)
                return Wait(now)
            return self._advance(None, now, records=0, full=False, behind=0)
        return GetIterator(TRIM_HORIZON, after_trim=True)

    def _reload_before(self, records: tuple[StreamRecord, ...], now: int) -> None:
        """Hold the shard's first readable ``records`` (the pending batch) until a reload is over."""
        if self.gap_from is None or self.reload is not None:
            return
        first = records[0] if records else None
        start = StartReload(
            self.gap_from, first.sequence_number if first else None, self.last_created, _created(first)
        )
        s = self.settings
        self.reload = ReloadRun(start, s.reload_scan_segments, s.reload_page_items, now)

    def _reload_request(self) -> ReloadRequest:
        assert self.reload is not None
        request = self.reload.next_request()
        assert request is not None  # the run is dropped once it is over
        return request

    def _reload_answered(self, request: Request, outcome: Outcome, now: int) -> Wait | None:
        run = self.reload
        assert run is not None
        self.backoff.reset()
        if isinstance(request, StartReload):
            assert isinstance(outcome, ReloadStarted)
            run.started(outcome)
            return None
        if isinstance(request, ScanPage):
            if isinstance(outcome, Paced):
                return Wait(outcome.until)
            assert isinstance(outcome, Scanned)
            run.scanned(request, outcome)
            return None
        if isinstance(request, DeliverReload):
            run.delivered_page()
            return Wait(now)  # one page a step: other shards' steps go in between
        # Over: the shard's own records go on from the first readable one (or the shard ends).
        self._notes.append(run.finished(now))
        self.reload, self.gap_from = None, None
        pending = self.pending
        if self.gap_gone or (pending is not None and not pending.records and not pending.malformed):
            self.gap_gone, self.pending = False, None
            if not self.settings.call_process_records_even_for_empty_record_list or pending is None:
                iterator = None if pending is None else pending.next_iterator
                return self._advance(iterator, now, records=0, full=False, behind=0)
            self.pending = pending
        return None


def _created(record: StreamRecord | None) -> float | None:
    try:
        return None if record is None else record.approximate_creation_time
    except RecordFormatError:
        return None

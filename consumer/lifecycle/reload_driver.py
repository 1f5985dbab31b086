"""Carries out a reload's requests (:mod:`consumer.lifecycle.reload_run`) for one shard's consumer.

The I/O of a reload, beside :class:`~consumer.lifecycle.shard_consumer.ShardConsumer`'s own: the
table described and scanned (:class:`~consumer.lifecycle.ports.TableScanner`), the pace kept with
the worker's :class:`~consumer.lifecycle.reload_pacing.ReloadBudget`, the processor told of the gap
and handed the re-loaded records, and the reload's figures and log lines.

The reload's start, ``reload_started_at``, is stamped before the first page is read, minus the
clock skew allowed and a second (a stream record's creation time is DynamoDB's clock, in whole
seconds): every change the reload's reads may have missed is created after it, so it is among the
stream records still to come, and a sink that prefers a change created at or after the stamp to a
re-loaded record, and a re-loaded record to anything created before, ends at the table's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from consumer.lifecycle.ports import ReloadTables, TableScanner
from consumer.lifecycle.reload_pacing import ReloadBudget, ReloadRate, reload_rate
from consumer.lifecycle.reload_run import (
    DeliverReload,
    Paced,
    Reloaded,
    ReloadRequest,
    ReloadStarted,
    Scanned,
    ScanPage,
    StartReload,
)
from consumer.lifecycle.shard_actions import Done
from consumer.processing.api import (
    Checkpointer,
    GapInput,
    ProcessRecordsInput,
    RecordProcessor,
    ReloadedInput,
)
from consumer.processing.gap import GapEvent, reload_id, reloaded_record
from consumer.records import ShardInfo
from consumer.telemetry.catalogue import log_reload_delivered, log_reload_started
from consumer.telemetry.metrics import Metrics
from ground.clock import Clock
from ground.settings import WorkerSettings

log = logging.getLogger("consumer.lifecycle")
STAMP_MARGIN_MILLIS = 1000  # stream creation times are whole seconds


class _RecordsNothing:
    """The checkpointer of a batch of re-loaded records: they are no position in the shard, so a
    checkpoint there records nothing (the lease's checkpoint stays before the gap until the shard's
    own records after the reload are processed)."""

    def checkpoint(self, sequence_number: str | None = None) -> None:
        return None

    def checkpoint_shard_end(self) -> None:
        return None

    def finished(self, sequence_numbers: object) -> None:
        return None


@dataclass(frozen=True)
class ReloadCall:
    """What of its shard consumer a reload uses: the processor and the checkpointer it hands it, the
    consumer's settings, clock and metrics, and its lease signals."""

    processor: RecordProcessor
    checkpointer: Checkpointer
    settings: WorkerSettings
    clock: Clock
    metrics: Metrics
    should_stop: Callable[[], bool]
    lease_held: Callable[[], bool]


Reloads = tuple[ReloadTables, ReloadBudget]
"""Where a worker's reloads read (each shard's table) and the pace they share."""


class ReloadDriver:
    def __init__(self, shard: ShardInfo, reloads: Reloads | None, call: ReloadCall) -> None:
        """``reloads`` None: on_trimmed is not reload, and the machine never asks for one."""
        self._shard = shard
        self._reloads = reloads
        self._processor = call.processor
        self._checkpointer = call.checkpointer
        self._settings = call.settings
        self._clock = call.clock
        self._metrics = call.metrics
        self._should_stop = call.should_stop
        self._lease_held = call.lease_held
        self._rate = ReloadRate(self._settings.reload_on_demand_read_units_per_second, "not described yet")
        self._keys: tuple[str, ...] = ()
        self._view = "NEW_AND_OLD_IMAGES"
        self._gap: GapEvent | None = None

    def carry_out(self, request: ReloadRequest) -> ReloadStarted | Scanned | Paced | Done:
        if self._reloads is None:
            raise RuntimeError(f"shard {self._shard.shard_id}: a reload, but no table to read")
        if isinstance(request, StartReload):
            return self._start(request)
        if isinstance(request, ScanPage):
            return self._scan(request)
        if isinstance(request, DeliverReload):
            self._deliver(request)
        else:
            self._tell(request.gap)
        return Done()

    def report(self, note: Reloaded) -> None:
        sid = self._shard.shard_id
        self._metrics.count("Reload", "ReloadedGaps", 1, shard_id=sid)
        log_reload_delivered(log, sid, note.gap, pages=note.pages, units=note.units, millis=note.millis)

    def _start(self, request: StartReload) -> ReloadStarted:
        described = self._table().describe()
        self._rate = reload_rate(described, self._settings)
        self._keys = tuple(k["AttributeName"] for k in described.get("KeySchema", ()))
        self._view = str((described.get("StreamSpecification") or {}).get("StreamViewType", self._view))
        stamp = self._clock.wall_millis() - self._settings.max_clock_skew_millis - STAMP_MARGIN_MILLIS
        gap = GapEvent(
            self._shard,
            "gap",
            request.last_position,
            request.first_readable,
            request.lost_from,
            request.lost_until,
            reload_id(self._shard.shard_id, stamp),
            stamp / 1000,
        )
        log_reload_started(log, self._shard.shard_id, gap, self._rate.units_per_second, self._rate.why)
        self._tell(gap)
        self._gap = gap
        return ReloadStarted(gap)

    def _scan(self, request: ScanPage) -> Scanned | Paced:
        rate = self._rate.units_per_second
        now = self._clock.monotonic_millis()
        table, budget = self._table(), self._budget()
        wait = budget.take(rate, now)
        if wait > 0:
            return Paced(now + wait)
        try:
            page = table.scan_page(request.segment, request.total_segments, request.start_key, request.limit)
        except BaseException:
            budget.spent(rate, 0.0, now)  # the page is no longer in flight (retried after a back-off)
            raise
        budget.spent(rate, page.units, now)
        self._metrics.count("Reload", "ReloadReadUnits", page.units, "Count", self._shard.shard_id)
        gap = self._gap
        assert gap is not None
        records = tuple(
            reloaded_record(
                item,
                key_names=self._keys,
                number=request.first_number + i,
                gap=gap,
                view_type=self._view,
                region=table.region,
            )
            for i, item in enumerate(page.items)
        )
        return Scanned(records, page.last_key, page.units)

    def _deliver(self, request: DeliverReload) -> None:
        gap = self._gap
        assert gap is not None
        records = request.records
        handle = getattr(self._processor, "process_reloaded", None)
        if callable(handle):
            handle(ReloadedInput(records, gap, self._shard, self._should_stop, self._lease_held))
        else:
            self._processor.process_records(
                ProcessRecordsInput(
                    records, _RecordsNothing(), 0, self._shard, self._should_stop, self._lease_held
                )
            )
        self._metrics.count("Reload", "RecordsReloaded", len(records), shard_id=self._shard.shard_id)

    def _table(self) -> TableScanner:
        assert self._reloads is not None
        return self._reloads[0](self._shard.shard_id)

    def _budget(self) -> ReloadBudget:
        assert self._reloads is not None
        return self._reloads[1]

    def _tell(self, gap: GapEvent) -> None:
        tell = getattr(self._processor, "gap", None)
        if callable(tell):
            tell(GapInput(gap, self._checkpointer, self._should_stop, self._lease_held))

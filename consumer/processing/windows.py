"""Tumbling windows (``processing.tumbling_window_seconds``, Lambda's TumblingWindowInSeconds).

The shard's records are cut into fixed windows of W seconds by their ``approximate_creation_time``
(the window of a record is ``[floor(t / W) * W, + W)``, the same for every owner of the shard). A
windowed handler ``handle(batch: WindowedBatch) -> dict | None`` gets, with each batch of one
window, the window's ``state`` so far (a JSON object: ``{}`` when the window starts) and returns the
new state (``None``: unchanged). When the window is over it is called once more with no records and
``window.is_final`` true — when the first record of a later window arrives, when the shard is
caught up and the window's end has passed on the wall clock (an idle shard), and at shard end
(``window.shard_ended`` true too). What it does then (write the aggregate somewhere) is its business.

Where the state lives: with every checkpoint the state *as of that sequence number* is written to a
small store of its own (:class:`WindowStateStore`: in memory for tests, a DynamoDB table for the
fleet) **before** the checkpoint is, keyed by (application, shard, sequence number); a new owner of
the lease loads the version whose sequence number equals the checkpoint it resumes from
(``InitializationInput.checkpoint``), so a worker that wrote the state and died before its
checkpoint leaves a version nobody reads. The last two versions are kept (the older one covers a
checkpoint that failed after its state was written), and every version since the last checkpoint
the table took while checkpoints are refused for now (a throttled table: the function form defers
them); a new owner deletes the versions before the one it resumed from (a later one may be a
newer owner's), and shard end deletes the shard's versions. The leases table never holds
state: every lease taker scans it.

Failures: the state is functional. A handler that raises leaves the state as it was, and the
failure policy retries the span (bisection splits it; the halves run in order, each from the state
the previous one returned). A flush that raises (a state that cannot be saved, the lease lost)
rolls the state back to the last saved version: the lifecycle delivers the records after the
checkpoint again and they must not count twice. A ``final`` call may be repeated after a crash
(the state it closes is saved, its closing is not): make what it writes idempotent, per window.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from consumer.processing.api import Batch, BatchResult, _always, _never
from consumer.processing.errors import ProcessingError
from consumer.processing.failure_policy import OPERATION, FailurePolicyRunner
from consumer.processing.runner import Delivery, RunnerEvents, ignore_finished
from consumer.processing.window_state import (
    SavedWindow,
    WindowStateStore,
    version_of,
)
from consumer.records import ShardInfo, StreamRecord
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.positions import is_position

log = logging.getLogger("consumer.processing")

IDLE_CLOSE_GRACE_MILLIS = 2000  # an idle window closes this long after its end (stream propagation)


class WindowStateTooLargeError(ProcessingError):
    """A handler returned a state larger than ``processing.max_window_state_bytes``."""


@dataclass(frozen=True, slots=True)
class Window:
    start: float  # epoch seconds, inclusive
    end: float  # epoch seconds, exclusive
    is_final: bool = False  # the last call for this window: no records, the state is complete
    shard_ended: bool = False  # final because the shard ended (its children start after this)


@dataclass(frozen=True, slots=True)
class WindowedBatch:
    """What a windowed handler receives: records of one shard and one window, and the state."""

    shard: ShardInfo
    records: tuple[StreamRecord, ...]
    state: dict[str, Any]
    window: Window
    millis_behind_latest: int = 0
    should_stop: Callable[[], bool] = field(default=_never)
    lease_held: Callable[[], bool] = field(default=_always)

    @property
    def shard_id(self) -> str:
        return self.shard.shard_id


WindowedHandler = Callable[[WindowedBatch], "dict[str, Any] | None"]


def window_start(created: float, seconds: int) -> float:
    return float(math.floor(created / seconds) * seconds)


class WindowedAdapter:
    """The function-form handler the failure policy calls: runs the user's windowed handler on one
    window's records with the state so far, keeps the new state, and closes windows."""

    def __init__(
        self,
        handler: WindowedHandler,
        seconds: int,
        max_state_bytes: int,
        metrics: Metrics | None = None,
    ) -> None:
        self.user = handler
        self._seconds = seconds
        self._max_bytes = max_state_bytes
        self._metrics = metrics or NullMetrics()
        self.start: float | None = None
        self.closed = False
        self.state: dict[str, Any] = {}
        self.segment_start: float | None = None  # the window of the records being run now

    @property
    def seconds(self) -> int:
        return self._seconds

    def effective_start(self, created: float, start: float | None, closed: bool) -> float:
        """The window a record counts in, given the open window (``start``, ``closed``): its own,
        unless that window is already over here (a late record), then the first one still open."""
        own = window_start(created, self._seconds)
        if start is None:
            return own
        own = max(own, start)
        if own == start and closed:
            own = start + self._seconds
        return own

    def restore(self, saved: SavedWindow | None) -> None:
        self.start = saved.window_start if saved else None
        self.closed = saved.closed if saved else False
        self.state = copy.deepcopy(saved.state) if saved else {}

    def snapshot(self, sequence_number: str) -> SavedWindow:
        return SavedWindow(sequence_number, self.start, self.closed, copy.deepcopy(self.state))

    def close(
        self,
        shard: ShardInfo,
        *,
        shard_ended: bool = False,
        should_stop: Callable[[], bool] = _never,
        lease_held: Callable[[], bool] = _always,
    ) -> None:
        """The open window is over: the final call (no records), then nothing is open."""
        if self.start is None or self.closed:
            return
        window = Window(self.start, self.start + self._seconds, True, shard_ended)
        state = self._checked(
            self.user(
                WindowedBatch(shard, (), copy.deepcopy(self.state), window, 0, should_stop, lease_held)
            ),
            shard,
        )
        self.state = state
        self.closed = True

    def __call__(self, batch: Batch) -> BatchResult | None:
        if not batch.records:
            return None
        start = self.segment_start
        if start is None:
            start = self.effective_start(batch.records[0].approximate_creation_time, self.start, self.closed)
        if self.start is not None and start > self.start and not self.closed:
            self.close(batch.shard, should_stop=batch.should_stop, lease_held=batch.lease_held)
        if self.start is None or start > self.start:
            self.start, self.closed, self.state = start, False, {}
        window = Window(start, start + self._seconds)
        returned = self.user(
            WindowedBatch(
                batch.shard,
                batch.records,
                copy.deepcopy(self.state),
                window,
                batch.millis_behind_latest,
                batch.should_stop,
                batch.lease_held,
            )
        )
        if returned is not None:
            self.state = self._checked(returned, batch.shard)
        return None

    def _checked(self, state: dict[str, Any] | None, shard: ShardInfo) -> dict[str, Any]:
        if state is None:
            return self.state
        if not isinstance(state, dict):
            raise WindowStateTooLargeError(
                f"shard {shard.shard_id}: a windowed handler returns its new state as a dict (or None), "
                f"not {type(state).__name__}"
            )
        try:
            size = len(json.dumps(state, separators=(",", ":"), sort_keys=True).encode())
        except (TypeError, ValueError) as exc:
            raise WindowStateTooLargeError(
                f"shard {shard.shard_id}: the window state must be JSON (str, int, float, bool, None, "
                f"lists and dicts of them): {exc}"
            ) from exc
        self._metrics.gauge(OPERATION, "WindowStateBytes", size, "Bytes", shard.shard_id)
        if size > self._max_bytes:
            raise WindowStateTooLargeError(
                f"shard {shard.shard_id}: the window state is {size} bytes, over "
                f"processing.max_window_state_bytes ({self._max_bytes}); keep aggregates, not records"
            )
        return state


class WindowedRunner(RunnerEvents):
    """Runs the failure policy window by window, saving the state before every checkpoint."""

    def __init__(
        self,
        runner: FailurePolicyRunner,
        adapter: WindowedAdapter,
        store: WindowStateStore,
        clock: Clock,
    ) -> None:
        self._runner = runner
        self._adapter = adapter
        self._store = store
        self._clock = clock
        self._saved: SavedWindow | None = None  # as of the last checkpoint
        self._kept: list[str] = []  # versions of this ownership, oldest first (two are kept)
        self._shard = ShardInfo("unknown")

    @property
    def handler(self) -> WindowedAdapter:
        return self._adapter

    @property
    def adapter(self) -> WindowedAdapter:
        return self._adapter

    def start(self, shard: ShardInfo, checkpoint: str) -> None:
        """A new ownership from ``checkpoint``: resume the state saved with it, drop older ones.

        Only older ones: nobody resumes before a checkpoint the table held, but a later version may
        be a newer owner's — this one may be a worker that was stopped while it initialized and
        resumes only after another has taken the shard over (a zombie); deleting it would leave the
        next owner an empty window. Later versions nobody reads go at shard end."""
        self._shard = shard
        saved = self._store.load(shard.shard_id, checkpoint) if is_position(checkpoint) else None
        if saved is None and is_position(checkpoint):
            log.info(
                "shard %s: no window state saved as of checkpoint %s; the window starts empty",
                shard.shard_id,
                checkpoint,
            )
        self._adapter.restore(saved)
        self._saved = saved
        start = version_of(checkpoint) if is_position(checkpoint) else ""
        others = [v for v in self._store.versions(shard.shard_id) if start and v < start]
        if others:
            self._store.delete(shard.shard_id, others)
        self._kept = [version_of(checkpoint)] if saved is not None else []

    def run(self, delivery: Delivery) -> bool:
        shard, delivered, checkpoint = delivery.shard, delivery.delivered, delivery.checkpoint
        self._shard = shard

        def save_then_checkpoint(sequence_number: str) -> None:
            saved = self._adapter.snapshot(sequence_number)
            self._store.save(shard.shard_id, saved)
            self._saved = saved
            self._kept.append(version_of(sequence_number))
            if checkpoint(sequence_number) is False:
                # Deferred (a throttled leases table): the table still names an older version, which
                # the next owner loads. Nothing is pruned until a checkpoint is written again.
                return
            if len(self._kept) > 2:
                old, self._kept = self._kept[:-2], self._kept[-2:]
                self._store.delete(shard.shard_id, old)

        try:
            for start, segment in self._segments(delivered):
                self._adapter.segment_start = start
                if not self._runner.run(
                    replace(
                        delivery,
                        delivered=segment,
                        checkpoint=save_then_checkpoint,
                        finished=ignore_finished,
                    )
                ):
                    self._rewind()
                    return False
        except BaseException:
            self._rewind()
            raise
        finally:
            self._adapter.segment_start = None
        return True

    def _rewind(self) -> None:
        """What was not checkpointed is delivered again: the state goes back to the saved one."""
        self._adapter.restore(self._saved)

    def _segments(self, delivered: Sequence[StreamRecord]) -> list[tuple[float, tuple[StreamRecord, ...]]]:
        """``delivered`` cut where the window changes (each run of the policy is one window)."""
        segments: list[tuple[float, list[StreamRecord]]] = []
        start, closed = self._adapter.start, self._adapter.closed
        for record in delivered:
            own = self._adapter.effective_start(record.approximate_creation_time, start, closed)
            if start is None or own != start:
                start, closed = own, False
            if not segments or segments[-1][0] != start:
                segments.append((start, []))
            segments[-1][1].append(record)
        return [(start, tuple(records)) for start, records in segments]

    def idle(self, shard: ShardInfo, millis_behind_latest: int, should_stop: Callable[[], bool]) -> None:
        """An empty call on a caught-up shard: close the open window once its end has passed."""
        adapter = self._adapter
        if adapter.start is None or adapter.closed or millis_behind_latest > 0 or should_stop():
            return
        end_millis = (adapter.start + adapter.seconds) * 1000
        if self._clock.wall_millis() < end_millis + IDLE_CLOSE_GRACE_MILLIS:
            return
        try:
            adapter.close(shard, should_stop=should_stop)
        except Exception as exc:
            log.warning(
                "shard %s: closing window %s failed: %r; trying again", shard.shard_id, adapter.start, exc
            )
            return
        if self._saved is not None:
            self._saved = adapter.snapshot(self._saved.sequence_number)

    def finish(self, shard: ShardInfo, should_stop: Callable[[], bool]) -> None:
        """Shard end: the open window's final call (raises: the lifecycle calls shard_ended again)."""
        self._adapter.close(shard, shard_ended=True, should_stop=should_stop)

    def forget(self, shard: ShardInfo) -> None:
        """The shard is finished (SHARD_END checkpointed): its versions are of no use to anybody."""
        self._kept = []
        try:
            versions = self._store.versions(shard.shard_id)
            if versions:
                self._store.delete(shard.shard_id, versions)
        except Exception as exc:  # SHARD_END is recorded: nobody resumes these; they are only litter
            log.warning("shard %s: could not delete its window states: %r", shard.shard_id, exc)

"""A reload, as a pure machine: the part of a shard's consumer that repairs a gap from the table.

With ``worker.on_trimmed: reload``, a shard whose data was trimmed before it was read goes on at the
oldest record left — but first every item of the table is delivered again, from a parallel Scan
paced to a share of the table's read capacity. :class:`ReloadRun` says, one request at a time, what
the driver does (:class:`StartReload`, :class:`ScanPage`, :class:`DeliverReload`,
:class:`EndReload`); :class:`~consumer.lifecycle.shard_machine.ShardMachine` holds the run and the
shard's first readable batch while it lasts, and delivers that batch only once the run is over::

    StartReload ──> ScanPage ──Scanned──> DeliverReload ──> ScanPage ... ──> EndReload ──> (the shard)
                       │  ▲
                 Paced │  │ (a later step)
                       └──┘

Nothing of the run is written anywhere: the lease's checkpoint stays at the last position read
before the gap until the shard's own records after the run are processed (a re-loaded record moves
no checkpoint), so a worker that stops or crashes mid-run leaves the gap to be found again by the
shard's next consumer, which reloads from the start. A failed request is retried with back-off by
the shard machine, as any other; a page delivered again is the same page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from consumer.processing.gap import GapEvent
from consumer.records import StreamRecord

StartKey = Mapping[str, Any] | None

# ------------------------------------------------------------------------------------ requests


@dataclass(frozen=True, slots=True)
class StartReload:
    """Describe the table (its capacity: the pace), stamp the reload's start, tell the processor
    of the gap. Answer :class:`ReloadStarted`."""

    last_position: str
    first_readable: str | None
    lost_from: float | None
    lost_until: float | None


@dataclass(frozen=True, slots=True)
class ScanPage:
    """One page of one segment, numbering its records from ``first_number``, if the pace allows.
    Answer :class:`Scanned`, or :class:`Paced` when it does not yet."""

    segment: int
    total_segments: int
    start_key: StartKey
    limit: int
    first_number: int


@dataclass(frozen=True, slots=True)
class DeliverReload:
    """Hand a page of re-loaded records to the processor. Answer ``Done``."""

    records: tuple[StreamRecord, ...]


@dataclass(frozen=True, slots=True)
class EndReload:
    """Tell the processor the reload is delivered (the gap event, phase ``reloaded``). Answer ``Done``."""

    gap: GapEvent


ReloadRequest = StartReload | ScanPage | DeliverReload | EndReload
RELOAD_REQUESTS = (StartReload, ScanPage, DeliverReload, EndReload)

# ------------------------------------------------------------------------------------ outcomes


@dataclass(frozen=True, slots=True)
class ReloadStarted:
    gap: GapEvent


@dataclass(frozen=True, slots=True)
class Scanned:
    records: tuple[StreamRecord, ...]
    next_key: StartKey  # None: the segment is read to its end
    units: float  # read capacity the page consumed


@dataclass(frozen=True, slots=True)
class Paced:
    """Over the reload's share of capacity: ask again at ``until`` (monotonic ms)."""

    until: int


# ---------------------------------------------------------------------------------------- notes


@dataclass(frozen=True, slots=True)
class Reloaded:
    """A reload was delivered whole: logged and counted (RecordsReloaded, ReloadedGaps)."""

    gap: GapEvent
    pages: int
    units: float
    millis: int


_DONE = object()


@dataclass
class ReloadRun:
    start: StartReload
    total_segments: int
    page_items: int
    started_millis: int
    gap: GapEvent | None = None
    cursors: list[object] = field(default_factory=list)  # per segment: the next start key, or _DONE
    next_segment: int = 0
    delivered: int = 0
    pages: int = 0
    units: float = 0.0
    in_hand: tuple[StreamRecord, ...] | None = None
    ended: bool = False

    def __post_init__(self) -> None:
        if not self.cursors:
            self.cursors = [None] * self.total_segments

    @property
    def scanned_to_end(self) -> bool:
        return all(c is _DONE for c in self.cursors)

    def next_request(self) -> ReloadRequest | None:
        """What to do next; None once the processor was told the reload is over."""
        if self.gap is None:
            return self.start
        if self.in_hand is not None:
            return DeliverReload(self.in_hand)
        if not self.scanned_to_end:
            segment = self.next_segment
            cursor = self.cursors[segment]
            assert cursor is not _DONE
            start_key: StartKey = cursor  # type: ignore[assignment]
            number = self.delivered + 1
            return ScanPage(segment, self.total_segments, start_key, self.page_items, number)
        if not self.ended:
            return EndReload(self.gap.finished(self.delivered))
        return None

    def started(self, outcome: ReloadStarted) -> None:
        self.gap = outcome.gap

    def scanned(self, request: ScanPage, outcome: Scanned) -> None:
        self.units += outcome.units
        self.pages += 1
        self.cursors[request.segment] = _DONE if outcome.next_key is None else outcome.next_key
        self.in_hand = outcome.records or None
        # Round robin over the segments not finished: every segment moves, one page at a time.
        for step in range(1, self.total_segments + 1):
            candidate = (request.segment + step) % self.total_segments
            if self.cursors[candidate] is not _DONE:
                self.next_segment = candidate
                break

    def delivered_page(self) -> None:
        assert self.in_hand is not None
        self.delivered += len(self.in_hand)
        self.in_hand = None

    def finished(self, now: int) -> Reloaded:
        self.ended = True
        assert self.gap is not None
        return Reloaded(self.gap.finished(self.delivered), self.pages, self.units, now - self.started_millis)

"""The one redelivery rule of the record path: a record already done on its shard is not handed on.

What is *done* on one shard is kept as a :class:`DoneSequences`: a **floor** (every sequence number
at or below it is done) and a few disjoint **ranges** above it (islands known done, with records
not yet done between them). The rule, wherever a record could arrive a second time:

    a record is handed on only if its position is above the floor and in no range.

Positions are :func:`ground.positions.ordinal`'s integers: a sequence number, with a Kinesis user
record's sub-sequence number in its low bits (the user records of one KPL aggregate share their
sequence number).

Two places apply it, each with what only it can know (docs/processing.md "Redelivery"):

* the shard consumer (:mod:`consumer.lifecycle.shard_consumer`) keeps the floor at the shard's
  checkpoint: a batch delivered again after the processor raised is cut to what is after the
  checkpoint — a redelivery inside one worker process;
* the ``changelog`` sink (:mod:`consumer.sinks.changelog`) must also survive a redelivery *across*
  workers (an earlier owner landed objects but its checkpoint never did): only the destination
  knows, so each time the sink starts a shard it lists the shard's objects and keeps as ranges the
  ones after the checkpoint it starts from; its floor then follows what it handled.

Memory stays bounded because knowledge only ever collapses into the floor: raising the floor drops
every range at or below it, a range that reaches the floor becomes the floor, and overlapping or
touching ranges merge. A floor costs one integer; ranges exist only above it. The state belongs to
one shard's ownership and is dropped with it (lease lost, shard end, hand-off).

``comparisons`` counts the range comparisons made, a deterministic measure of the work per batch
(tests assert it stays flat; they never time anything).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

from consumer.records import StreamRecord
from ground.positions import is_position, ordinal

NOTHING_DONE = -1  # the floor of a shard read from TRIM_HORIZON or LATEST: no sequence number is done


def floor_of(position: str) -> int:
    """A checkpoint as a floor: a position's :func:`~ground.positions.ordinal`, or NOTHING_DONE for
    TRIM_HORIZON / LATEST."""
    return ordinal(position) if is_position(position) else NOTHING_DONE


@dataclass(frozen=True, slots=True)
class Fresh:
    """What of a batch is still to hand on: ``runs`` of consecutive not-yet-done records (in order;
    a run ends where done records were cut out) and how many records were ``skipped`` as done."""

    runs: tuple[tuple[StreamRecord, ...], ...]
    skipped: int

    @property
    def records(self) -> tuple[StreamRecord, ...]:
        return self.runs[0] if len(self.runs) == 1 else tuple(chain.from_iterable(self.runs))


class DoneSequences:
    """One shard's done sequence numbers: a floor and disjoint, sorted, non-touching ranges above it.

    Not thread-safe: one shard's records are handled by one thread at a time.
    """

    def __init__(self, floor: int = NOTHING_DONE, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._floor = floor
        self._firsts: list[int] = []  # range starts, sorted (bisect looks up here)
        self._lasts: list[int] = []  # the matching range ends
        self.comparisons = 0
        for first, last in sorted(ranges):
            self.add(first, last)

    @property
    def floor(self) -> int:
        return self._floor

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self._firsts, self._lasts, strict=True))

    @property
    def size(self) -> int:
        """How much is remembered beyond the floor: the number of ranges kept (not ``__len__``: an
        instance with no ranges still knows its floor, and must not read as false)."""
        return len(self._firsts)

    def covers(self, number: int) -> bool:
        if number <= self._floor:
            return True
        index = bisect_left(self._lasts, number)
        self.comparisons += 1
        return index < len(self._firsts) and self._firsts[index] <= number

    def advance(self, to: int) -> None:
        """Everything at or below ``to`` is done: raise the floor, absorbing the ranges it reaches."""
        self._floor = max(self._floor, to)
        drop = 0
        while drop < len(self._firsts) and self._firsts[drop] <= self._floor + 1:
            self.comparisons += 1
            self._floor = max(self._floor, self._lasts[drop])
            drop += 1
        if drop:
            del self._firsts[:drop], self._lasts[:drop]

    def add(self, first: int, last: int) -> None:
        """Records ``first`` to ``last`` (inclusive) are done: merge the range in."""
        if last <= self._floor:
            return
        if first <= self._floor + 1:
            self.advance(last)
            return
        # Ranges that overlap or touch [first, last] are merged with it into one.
        start = bisect_left(self._lasts, first - 1)
        end = start
        while end < len(self._firsts) and self._firsts[end] <= last + 1:
            self.comparisons += 1
            first, last = min(first, self._firsts[end]), max(last, self._lasts[end])
            end += 1
        self._firsts[start:end] = [first]
        self._lasts[start:end] = [last]

    def fresh(self, records: Sequence[StreamRecord]) -> Fresh:
        """Split records of this shard, in sequence order, into the runs still to hand on.

        One bisect for the first record, then one walk through the ranges beside the records:
        the work is the batch's length plus the ranges it spans, whatever the shard's history. With
        no ranges and the first record above the floor, every record is above it (they are in
        order), so the batch is handed on whole without looking at the others: the common case, a
        batch read after everything done so far.
        """
        if not self._firsts and records and ordinal(records[0].position) > self._floor:
            return Fresh((tuple(records),), 0)
        runs: list[tuple[StreamRecord, ...]] = []
        run: list[StreamRecord] = []
        skipped = 0
        index: int | None = None
        for record in records:
            number = ordinal(record.position)
            done = number <= self._floor
            if not done:
                if index is None:
                    index = bisect_left(self._lasts, number)
                while index < len(self._lasts) and self._lasts[index] < number:
                    self.comparisons += 1
                    index += 1
                self.comparisons += 1
                done = index < len(self._firsts) and self._firsts[index] <= number
            if done:
                skipped += 1
                if run:
                    runs.append(tuple(run))
                    run = []
            else:
                run.append(record)
        if run:
            runs.append(tuple(run))
        return Fresh(tuple(runs), skipped)

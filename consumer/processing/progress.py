"""What one flush finished, and the checkpoint that allows, for a runner that finishes records out
of shard order (``processing.on_failure: park_key``, :mod:`consumer.processing.key_parking`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from consumer.records import StreamRecord
from ground.positions import ordinal


def item_key(record: StreamRecord) -> bytes:
    """The item a record changes: its keys as the stream sends them, in one canonical form."""
    return orjson.dumps(record.typed_keys, option=orjson.OPT_SORT_KEYS)


class FlushProgress:
    """One flush's records: which are finished, and the checkpoint that allows.

    The checkpoint goes to the record just before the first unfinished one of ``delivered``; records
    finished beyond that are reported to ``finished`` before any checkpoint that covers them (the
    function form moves the checkpoint over them once what precedes them is finished too)."""

    def __init__(
        self,
        delivered: Sequence[StreamRecord],
        checkpoint: Callable[[str], object],
        finished: Callable[[Sequence[str]], None],
    ) -> None:
        self._delivered = delivered
        self._position = {r.position: i for i, r in enumerate(delivered)}
        self._done = bytearray(len(delivered))
        self._checkpoint = checkpoint
        self._finished = finished
        self.cursor = 0  # delivered[:cursor] are all finished
        self._checkpointed = 0

    def finish(self, records: Sequence[StreamRecord]) -> list[int]:
        """Mark ``records`` finished; returns the sequence numbers left beyond the checkpoint."""
        if not records:
            return []
        positions = [self._position[r.position] for r in records]
        for position in positions:
            self._done[position] = 1
        while self.cursor < len(self._delivered) and self._done[self.cursor]:
            self.cursor += 1
        ahead = [records[i].position for i, p in enumerate(positions) if p >= self.cursor]
        if ahead:
            self._finished(ahead)
        if self.cursor > self._checkpointed:
            self._checkpointed = self.cursor
            self._checkpoint(self._delivered[self.cursor - 1].position)
        return [ordinal(number) for number in ahead]

    @property
    def checkpointed(self) -> int | None:
        """The sequence number this flush last checkpointed (None: none yet)."""
        return ordinal(self._delivered[self._checkpointed - 1].position) if self._checkpointed else None

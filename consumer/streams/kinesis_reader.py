"""One Kinesis data stream, bound: the worker's read port (``iterator_at``, ``fetch``, ``list_shards``,
``list_children``) over :class:`~consumer.streams.kinesis.KinesisStreamSource`, as
:class:`~consumer.streams.reader.ShardReader` is for a table's stream.

What it adds to the source, each for one reason:

* **Resuming at a position.** The lifecycle keeps positions as text (:mod:`ground.positions`): a
  sequence number, or ``<sequence>.<sub>`` inside a KPL aggregate. DynamoDB Streams resumes *after*
  a sequence number; here, as the Java KCL does, the iterator starts *at* it and every user record at
  or below the position is dropped from what that iterator reads
  (:mod:`consumer.streams.kinesis_positions`), so a checkpoint inside an aggregate resumes inside it
  and a checkpoint at a plain record resumes just after it. The position is remembered with the
  iterator it was asked for and carried to the next iterator while a read returns nothing.
* **Records as the delivery path takes them.** Each user record becomes a
  :class:`~consumer.records.kinesis_stream_record.KinesisStreamRecord`, read with its shard's hash-key
  range (a user record outside it is the KPL's re-put duplicate, dropped as the Java KCL drops it);
  the ranges come from the listings, and a shard not listed yet is looked up once.
* **Read pacing.** A shard serves 5 GetRecords a second and 2 MiB a second to all its readers: each
  shard's next call waits what :mod:`consumer.streams.kinesis_pacing` says, counted from when the
  last answer was received (before it was parsed: the source's clock must be this reader's), and a refusal
  (:class:`~consumer.streams.errors.ThrottledError`) pushes the next call back before it is raised
  to the lifecycle's back-off.
"""

from __future__ import annotations

import random
import threading

from consumer.records.kinesis_stream_record import KinesisStreamRecord
from consumer.streams.errors import ThrottledError
from consumer.streams.kinesis import MAX_LIMIT, KinesisShard, KinesisStreamSource
from consumer.streams.kinesis_pacing import ReadPace
from consumer.streams.kinesis_positions import kinesis_resume_position
from consumer.streams.source import GetRecordsResult, Position, Shard
from ground.clock import Clock
from ground.positions import is_position, ordinal, split_position

_MAX_REMEMBERED = 10_000  # far above the shards one worker reads at once


class KinesisShardReader:
    """The lifecycle's stream port for one Kinesis data stream."""

    def __init__(
        self,
        source: KinesisStreamSource,
        stream_arn: str,
        clock: Clock,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._source = source
        self.stream_arn = stream_arn
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()  # shards are read from the scheduler's threads
        self._shards: dict[str, KinesisShard] = {}
        self._floors: dict[str, int] = {}  # iterator -> the position whose records it must not hand on
        self._paces: dict[str, ReadPace] = {}

    # ------------------------------------------------------------------------------- listings

    def _remember(self, shards: tuple[KinesisShard, ...]) -> None:
        with self._lock:
            self._shards.update((s.shard_id, s) for s in shards)

    def list_shards(self) -> tuple[Shard, ...]:
        """Every shard ListShards lists, both parents of a merge's child kept."""
        listed = self._source.list_shards(self.stream_arn)
        self._remember(listed)
        return tuple(s.as_shard() for s in listed)

    def list_children(self, shard_id: str) -> tuple[Shard, ...]:
        children = self._source.child_shards(self.stream_arn, shard_id)
        self._remember(children)
        return tuple(s.as_shard() for s in children)

    def _shard(self, shard_id: str) -> KinesisShard:
        with self._lock:
            known = self._shards.get(shard_id)
        if known is None:
            self.list_shards()
            with self._lock:
                known = self._shards.get(shard_id)
        # Not listed (gone past retention): no range is known, so no user record is dropped as
        # outside it -- a possible duplicate rather than a loss.
        return known if known is not None else KinesisShard(shard_id)

    # ---------------------------------------------------------------------------------- reads

    def iterator_at(self, shard_id: str, position: str) -> str:
        """An iterator at TRIM_HORIZON, LATEST, or *at* a position's sequence number, whose reads
        drop the user records at or below the position (module docstring)."""
        if is_position(position):
            sequence, _ = split_position(position)
            iterator = self._source.get_iterator(self.stream_arn, shard_id, Position.at(sequence))
            with self._lock:
                self._floors[iterator] = ordinal(position)
                while len(self._floors) > _MAX_REMEMBERED:  # iterators asked for and never read
                    del self._floors[next(iter(self._floors))]
            return iterator
        return self._source.get_iterator(self.stream_arn, shard_id, kinesis_resume_position(position))

    def most_records_per_read(self, shard_id: str) -> int:
        """Kinesis' GetRecords maximum, whatever the shard."""
        return MAX_LIMIT

    def fetch(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        shard = self._shard(shard_id)
        with self._lock:
            pace = self._paces.get(shard_id, ReadPace())
            floor = self._floors.pop(iterator, None)
        wait = pace.wait_ms(self._clock.monotonic_millis())
        if wait > 0:
            self._clock.sleep(wait)
        try:
            batch = self._source.get_records(iterator, min(max(limit, 1), MAX_LIMIT), shard)
        except ThrottledError:
            with self._lock:
                self._paces[shard_id] = pace.refused(self._clock.monotonic_millis(), self._rng)
                if floor is not None:
                    self._floors[iterator] = floor  # the same iterator is asked again
            raise
        # Paced from the body's receipt (the shard charged it before), not from the end of its parse.
        received = batch.received_ms if batch.received_ms is not None else self._clock.monotonic_millis()
        with self._lock:
            self._paces[shard_id] = pace.answered(received, batch.data_bytes)
        records = tuple(KinesisStreamRecord(r) for r in batch.records)
        if floor is not None:
            records = tuple(r for r in records if ordinal(r.position) > floor)
            if not batch.records and batch.next_iterator is not None:
                # Nothing read yet: the records at or below the position may still come.
                with self._lock:
                    self._floors[batch.next_iterator] = floor
        return GetRecordsResult(records, batch.next_iterator, batch.millis_behind_latest)

"""One Kinesis data stream's shards, records and resharding: the pure part of the emulator's Kinesis.

A Kinesis stream cuts the 128-bit hash-key space ``[0, 2**128)`` into contiguous ranges, one per
open shard; a record goes to the open shard whose range holds the MD5 of its partition key (or its
explicit hash key). Resharding closes shards and opens children:

* a **split** closes one shard and opens two, each covering one side of the new starting hash key
  (both name the closed shard as ``ParentShardId``);
* a **merge** closes two shards with adjacent ranges and opens one covering both, whose parents are
  ``ParentShardId`` (the shard to merge) and ``AdjacentParentShardId`` (the adjacent one): a child
  with two parents, which must both be read to their end before it is.

Because a child's range lies inside its parents' union, a partition key stays on one lineage, and
reading parents before children gives per-key order, as on AWS. Sequence numbers come from one
counter per stream that only moves forward, by a random step: they increase within a shard and from
parents to children (children are opened after the parents' ending sequence numbers are allocated),
are 56 digits long, as AWS's are, and are never contiguous.

Retention: a record older than the retention period is gone; a closed shard whose records are all
gone and that closed longer ago than the retention period is *expired* and no longer listed.

No I/O and no clock: every method takes ``now`` (monotonic ms) or ``wall`` (epoch ms) and is called
by :class:`emulator.kinesis_engine.KinesisEngine` under its lock.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import itertools
import random
from dataclasses import dataclass, field

HASH_SPACE = 2**128
FIRST_SEQUENCE = 496 * 10**53  # 56 digits, like the sequence numbers Kinesis hands out
MAX_SEQUENCE_STEP = 997


def hash_key_of(partition_key: str) -> int:
    """Where a partition key lands in the hash-key space: its MD5 read as a 128-bit integer."""
    return int.from_bytes(hashlib.md5(partition_key.encode()).digest(), "big")


class ReshardError(ValueError):
    """A split, merge or shard-count change that the stream cannot make (the API answers it)."""


@dataclass
class KinesisShard:
    shard_id: str
    parent_id: str | None
    adjacent_parent_id: str | None
    low: int  # StartingHashKey
    high: int  # EndingHashKey (inclusive)
    start_seq: int
    created_ms: int
    created_wall_ms: int
    end_seq: int | None = None
    closed_ms: int | None = None
    closed_wall_ms: int | None = None
    children: list[str] = field(default_factory=list)
    # Records in sequence order; ``seqs`` mirrors them for bisecting.
    seqs: list[int] = field(default_factory=list)
    data: list[str] = field(default_factory=list)  # base64, as the wire carries it
    keys: list[str] = field(default_factory=list)
    arrival_wall_ms: list[int] = field(default_factory=list)
    written_ms: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # data bytes + partition key bytes
    trimmed_through: int = 0  # the highest sequence number retention removed

    @property
    def is_open(self) -> bool:
        return self.end_seq is None

    @property
    def parents(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent_id, self.adjacent_parent_id) if p is not None)

    def last_seq(self) -> int:
        """The position after which nothing has been written yet."""
        if self.seqs:
            return self.seqs[-1]
        return max(self.start_seq - 1, self.trimmed_through)

    def contains(self, sequence: int) -> bool:
        upper = self.end_seq if self.end_seq is not None else max(self.last_seq(), self.start_seq)
        return self.start_seq <= sequence <= upper

    def index_after(self, after_seq: int) -> int:
        return bisect.bisect_right(self.seqs, after_seq)

    def index_at_time(self, wall_ms: int) -> int:
        """The first record that arrived at or after ``wall_ms``."""
        return bisect.bisect_left(self.arrival_wall_ms, wall_ms)

    def position(self, iterator_type: str, sequence: int | None, timestamp_ms: int | None) -> int:
        """The sequence number an iterator of this type reads *after*. A sequence number outside the
        shard raises ValueError; one before the trim horizon reads from the horizon on, as on AWS."""
        if iterator_type == "TRIM_HORIZON":
            return max(self.start_seq - 1, self.trimmed_through)
        if iterator_type == "LATEST":
            return self.last_seq() if self.is_open else (self.end_seq or 0)
        if iterator_type == "AT_TIMESTAMP":
            assert timestamp_ms is not None
            index = self.index_at_time(timestamp_ms)
            return self.seqs[index] - 1 if index < len(self.seqs) else self.last_seq()
        assert sequence is not None
        if not self.contains(sequence):
            raise ValueError(sequence)
        return sequence - 1 if iterator_type == "AT_SEQUENCE_NUMBER" else sequence

    def document(self, index: int) -> dict[str, object]:
        """Record ``index`` as GetRecords answers it."""
        return {
            "SequenceNumber": str(self.seqs[index]),
            "ApproximateArrivalTimestamp": self.arrival_wall_ms[index] / 1000,
            "Data": self.data[index],
            "PartitionKey": self.keys[index],
        }

    def child_document(self) -> dict[str, object]:
        """This shard as GetRecords names it in ``ChildShards`` at the end of a parent."""
        return {
            "ShardId": self.shard_id,
            "ParentShards": list(self.parents),
            "HashKeyRange": {"StartingHashKey": str(self.low), "EndingHashKey": str(self.high)},
        }

    def take(self, start: int, limit: int, max_bytes: int) -> range:
        """Indices of up to ``limit`` records from ``start``, within ``max_bytes`` (at least one record,
        as AWS returns a record larger than what is left of the budget on its own)."""
        used, end = 0, start
        stop = min(start + limit, len(self.seqs))
        while end < stop:
            size = self.sizes[end]
            if end > start and used + size > max_bytes:
                break
            used += size
            end += 1
        return range(start, end)


class KinesisStreamShards:
    """The shards of one stream, their records, and resharding."""

    def __init__(self, *, shard_count: int, rng: random.Random, now_ms: int, wall_ms: int) -> None:
        if shard_count < 1:
            raise ReshardError("a stream needs at least one shard")
        self._rng = rng
        self._last_seq = FIRST_SEQUENCE + rng.randrange(10**12)
        self._next_index = 0
        self.shards: dict[str, KinesisShard] = {}
        width = HASH_SPACE // shard_count
        for index in range(shard_count):
            low = index * width
            high = HASH_SPACE - 1 if index == shard_count - 1 else low + width - 1
            self._open((None, None), low, high, now_ms, wall_ms)

    # ------------------------------------------------------------------ sequence numbers, shards

    def _next_seq(self) -> int:
        self._last_seq += self._rng.randint(1, MAX_SEQUENCE_STEP)
        return self._last_seq

    def _open(
        self, parents: tuple[str | None, str | None], low: int, high: int, now_ms: int, wall_ms: int
    ) -> KinesisShard:
        shard_id = f"shardId-{self._next_index:012d}"
        self._next_index += 1
        parent, adjacent = parents
        shard = KinesisShard(shard_id, parent, adjacent, low, high, self._next_seq(), now_ms, wall_ms)
        self.shards[shard_id] = shard
        for parent_id in shard.parents:
            self.shards[parent_id].children.append(shard_id)
        return shard

    def _close(self, shard: KinesisShard, now_ms: int, wall_ms: int) -> None:
        shard.end_seq = self._next_seq()
        shard.closed_ms = now_ms
        shard.closed_wall_ms = wall_ms

    def ordered(self) -> list[KinesisShard]:
        """Every shard ever opened, in creation order (parents always before their children)."""
        return list(self.shards.values())

    def open_shards(self) -> list[KinesisShard]:
        """The open shards in hash-key order (they cover the whole space)."""
        return sorted((s for s in self.shards.values() if s.is_open), key=lambda s: s.low)

    # ------------------------------------------------------------------------------- writes

    def shard_for(self, hash_key: int) -> KinesisShard:
        for shard in self.open_shards():
            if shard.low <= hash_key <= shard.high:
                return shard
        raise AssertionError(f"hash key {hash_key} outside every open shard")  # ranges cover the space

    def append(self, shard: KinesisShard, data: bytes, partition_key: str, now_ms: int, wall_ms: int) -> int:
        """Give one record the next sequence number and append it to ``shard`` (open)."""
        seq = self._next_seq()
        shard.seqs.append(seq)
        shard.data.append(base64.b64encode(data).decode())
        shard.keys.append(partition_key)
        shard.arrival_wall_ms.append(wall_ms)
        shard.written_ms.append(now_ms)
        shard.sizes.append(len(data) + len(partition_key.encode()))
        return seq

    # ------------------------------------------------------------------------ resharding

    def _open_shard(self, shard_id: str) -> KinesisShard:
        shard = self.shards.get(shard_id)
        if shard is None:
            raise LookupError(shard_id)
        if not shard.is_open:
            raise ReshardError(f"shard {shard_id} is closed: only open shards can be split or merged")
        return shard

    def split(self, shard_id: str, new_starting_hash_key: int, now_ms: int, wall_ms: int) -> tuple[str, str]:
        """Close ``shard_id``; one child takes ``[start, new - 1]``, the other ``[new, end]``."""
        parent = self._open_shard(shard_id)
        if not parent.low < new_starting_hash_key <= parent.high:
            raise ReshardError(
                f"NewStartingHashKey {new_starting_hash_key} must lie inside shard {shard_id}'s range "
                f"({parent.low + 1}..{parent.high})"
            )
        self._close(parent, now_ms, wall_ms)
        left = self._open((parent.shard_id, None), parent.low, new_starting_hash_key - 1, now_ms, wall_ms)
        right = self._open((parent.shard_id, None), new_starting_hash_key, parent.high, now_ms, wall_ms)
        return left.shard_id, right.shard_id

    def merge(self, shard_id: str, adjacent_id: str, now_ms: int, wall_ms: int) -> str:
        """Close two shards with adjacent ranges; one child covers both, with both as its parents."""
        first, second = self._open_shard(shard_id), self._open_shard(adjacent_id)
        if shard_id == adjacent_id or not (first.high + 1 == second.low or second.high + 1 == first.low):
            raise ReshardError(
                f"shards {shard_id} and {adjacent_id} are not adjacent: their hash-key ranges must meet"
            )
        self._close(first, now_ms, wall_ms)
        self._close(second, now_ms, wall_ms)
        low, high = min(first.low, second.low), max(first.high, second.high)
        return self._open((first.shard_id, second.shard_id), low, high, now_ms, wall_ms).shard_id

    def scale_to(self, target: int, now_ms: int, wall_ms: int) -> list[str]:
        """UpdateShardCount UNIFORM_SCALING by real splits and merges: up, split the widest open shard
        at its middle until ``target`` are open; down, merge the adjacent pair covering the least
        until ``target``. Returns the shards opened (intermediate ones included)."""
        current = len(self.open_shards())
        if not (current + 1) // 2 <= target <= 2 * current:
            raise ReshardError(
                f"TargetShardCount {target} must lie between half ({(current + 1) // 2}) and double "
                f"({2 * current}) the {current} open shards"
            )
        opened: list[str] = []
        while len(self.open_shards()) < target:
            widest = max(self.open_shards(), key=lambda s: (s.high - s.low, -s.low))
            opened.extend(self.split(widest.shard_id, (widest.low + widest.high + 1) // 2, now_ms, wall_ms))
        while len(self.open_shards()) > target:
            ordered = self.open_shards()
            pairs = list(itertools.pairwise(ordered))
            left, right = min(pairs, key=lambda pair: (pair[1].high - pair[0].low, pair[0].low))
            opened.append(self.merge(left.shard_id, right.shard_id, now_ms, wall_ms))
        return opened

    # ---------------------------------------------------------------------------- retention

    def trim(self, cutoff_ms: int) -> int:
        """Drop records written at or before ``cutoff_ms`` (monotonic); returns how many."""
        dropped = 0
        for shard in self.shards.values():
            count = bisect.bisect_right(shard.written_ms, cutoff_ms)
            if count:
                shard.trimmed_through = shard.seqs[count - 1]
                for column in (shard.seqs, shard.data, shard.keys, shard.arrival_wall_ms, shard.written_ms):
                    del column[:count]
                del shard.sizes[:count]
                dropped += count
        return dropped

    def expired(self, shard: KinesisShard, cutoff_ms: int) -> bool:
        """Closed before the retention period began and emptied by it: no longer listed or readable."""
        return shard.closed_ms is not None and shard.closed_ms <= cutoff_ms and not shard.seqs

"""One stream's shards and partitions: the lineage AWS has and moto lacks.

The key space of partition-key hashes ``[0, 2**32)`` is cut into ranges, one per partition; each
partition writes to exactly one open shard. A *rollover* closes that shard and opens one child for
the same range; a *split* closes it and opens two children, one per half of the range. Because the
range of a child is always inside its parent's, every change to one item stays on one lineage, and
reading parents before children gives per-item order, as on AWS.

Sequence numbers come from one counter per stream that only moves forward, by a random step, so
they increase within a shard and from a parent to its children (children are opened after the
parent's ``EndingSequenceNumber`` is allocated) and are never contiguous.

This module does no I/O and reads no clock: every method takes ``now`` (monotonic milliseconds) and
is called by :class:`emulator.engine.StreamEngine` under its lock.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from typing import Any

HASH_SPACE = 2**32
# 21 digits, like the shortest sequence numbers AWS hands out.
FIRST_SEQUENCE = 100_000_000_000_000_000_000
MAX_SEQUENCE_STEP = 997


@dataclass
class Shard:
    shard_id: str
    parent_id: str | None
    ordinal: int
    start_seq: int
    created_ms: int
    rollover_due_ms: int
    end_seq: int | None = None
    closed_ms: int | None = None
    # Records are kept in sequence order; ``seqs`` mirrors them for bisecting.
    seqs: list[int] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    written_ms: list[int] = field(default_factory=list)
    # Highest sequence number removed by trimming; a reader positioned below it lost data.
    trimmed_through: int = 0
    removed: bool = False

    @property
    def is_open(self) -> bool:
        return self.end_seq is None

    def last_seq(self) -> int:
        """The position after which nothing has been written yet."""
        if self.seqs:
            return self.seqs[-1]
        return max(self.start_seq - 1, self.trimmed_through)

    def records_after(self, after_seq: int, limit: int, max_bytes: int) -> list[dict[str, Any]]:
        """Up to ``limit`` records with a sequence number above ``after_seq``, within ``max_bytes``
        (always at least one, as AWS returns a record larger than the remaining budget alone)."""
        start = bisect.bisect_right(self.seqs, after_seq)
        out: list[dict[str, Any]] = []
        used = 0
        for index in range(start, min(start + limit, len(self.records))):
            size = self.sizes[index]
            if out and used + size > max_bytes:
                break
            out.append(self.records[index])
            used += size
        return out


@dataclass
class Partition:
    low: int
    high: int  # exclusive
    shard_id: str

    def contains(self, key_hash: int) -> bool:
        return self.low <= key_hash < self.high


class StreamLineage:
    """Partitions, shards and sequence numbers of one stream."""

    def __init__(
        self,
        *,
        partitions: int,
        rollover_ms: int,
        rng: random.Random,
        now_ms: int,
        wall_ms: int,
    ) -> None:
        self._rng = rng
        self._rollover_ms = rollover_ms
        self._last_seq = FIRST_SEQUENCE + rng.randrange(10**9)
        self._ordinal = 0
        self.shards: dict[str, Shard] = {}
        self.partitions: list[Partition] = []
        width = HASH_SPACE // partitions
        for index in range(partitions):
            low = index * width
            high = HASH_SPACE if index == partitions - 1 else low + width
            shard = self._open_shard(None, now_ms, wall_ms)
            self.partitions.append(Partition(low, high, shard.shard_id))

    # ------------------------------------------------------------------ sequence numbers, shards

    def _next_seq(self) -> int:
        self._last_seq += self._rng.randint(1, MAX_SEQUENCE_STEP)
        return self._last_seq

    def _open_shard(self, parent_id: str | None, now_ms: int, wall_ms: int) -> Shard:
        self._ordinal += 1
        shard_id = f"shardId-{wall_ms:020d}-{self._rng.getrandbits(32):08x}"
        # Rollovers are staggered (±10 %) so partitions do not all roll at the same instant.
        due = now_ms + int(self._rollover_ms * (0.9 + 0.2 * self._rng.random()))
        shard = Shard(shard_id, parent_id, self._ordinal, self._next_seq(), now_ms, due)
        self.shards[shard_id] = shard
        return shard

    def _close_shard(self, shard: Shard, now_ms: int) -> None:
        shard.end_seq = self._next_seq()
        shard.closed_ms = now_ms

    def ordered_shards(self) -> list[Shard]:
        """Every shard ever opened, in creation order (parents always before their children)."""
        return sorted(self.shards.values(), key=lambda s: s.ordinal)

    # ------------------------------------------------------------------------------- writes

    def partition_for(self, key_hash: int) -> Partition:
        for partition in self.partitions:
            if partition.contains(key_hash):
                return partition
        raise AssertionError(f"hash {key_hash} outside every partition range")  # ranges cover the space

    def append(self, key_hash: int, record: dict[str, Any], size: int, now_ms: int) -> tuple[Shard, int]:
        """Give ``record`` the next sequence number and append it to its partition's open shard."""
        shard = self.shards[self.partition_for(key_hash).shard_id]
        seq = self._next_seq()
        shard.seqs.append(seq)
        shard.records.append(record)
        shard.sizes.append(size)
        shard.written_ms.append(now_ms)
        return shard, seq

    # ------------------------------------------------------------------------ lineage changes

    def rollover(self, index: int, now_ms: int, wall_ms: int) -> Shard:
        """Close partition ``index``'s shard and open one child for the same hash range."""
        partition = self.partitions[index]
        parent = self.shards[partition.shard_id]
        self._close_shard(parent, now_ms)
        child = self._open_shard(parent.shard_id, now_ms, wall_ms)
        partition.shard_id = child.shard_id
        return child

    def split(self, index: int, now_ms: int, wall_ms: int) -> tuple[Shard, Shard]:
        """Close partition ``index``'s shard; each half of its range writes to a new child."""
        partition = self.partitions[index]
        if partition.high - partition.low < 2:
            raise ValueError(f"partition {index} covers a single hash and cannot split")
        parent = self.shards[partition.shard_id]
        self._close_shard(parent, now_ms)
        middle = (partition.low + partition.high) // 2
        left = self._open_shard(parent.shard_id, now_ms, wall_ms)
        right = self._open_shard(parent.shard_id, now_ms, wall_ms)
        self.partitions[index : index + 1] = [
            Partition(partition.low, middle, left.shard_id),
            Partition(middle, partition.high, right.shard_id),
        ]
        return left, right

    def rollovers_due(self, now_ms: int) -> list[int]:
        return [
            index
            for index, partition in enumerate(self.partitions)
            if self.shards[partition.shard_id].rollover_due_ms <= now_ms
        ]

    def trim(self, cutoff_ms: int) -> int:
        """Drop records written at or before ``cutoff_ms``; retire closed shards left empty whose
        close is that old too (AWS forgets shards 24 h after they close). Returns records dropped."""
        dropped = 0
        for shard in self.shards.values():
            if shard.removed:
                continue
            count = bisect.bisect_right(shard.written_ms, cutoff_ms)
            if count:
                shard.trimmed_through = shard.seqs[count - 1]
                del shard.seqs[:count], shard.records[:count], shard.sizes[:count], shard.written_ms[:count]
                dropped += count
            closed_long_ago = shard.closed_ms is not None and shard.closed_ms <= cutoff_ms
            if closed_long_ago and not shard.seqs:
                shard.removed = True
        return dropped

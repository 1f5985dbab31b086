"""The stream's shard lineage, built from what DescribeStream listed — and tolerant of its lag.

DescribeStream on DynamoDB Streams is eventually consistent. Two shapes are normal for a while and
must never fail anything (the Java KCL 1.6 failed its whole shard sync with "Parent shardId … is not
closed"; that message is usually safe to ignore: the parent closes a moment later):

- a **closed shard listed without children** — its children are not visible yet;
- a **child listed while its parent still looks open** — the parent's end is not visible yet.

Both become :class:`LineageWarning` values for the caller to log at WARN and retry at the next sync.
A parent id that is not listed at all is not a warning: the parent was trimmed (older than 24 h).

A shard may have two parents (a Kinesis merge: ``Shard.parent_shard_ids``); every relation here
follows both. A DynamoDB Streams shard has at most one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from consumer.streams.source import Shard

WarningKind = Literal["closed_without_children", "parent_looks_open"]


@dataclass(frozen=True, slots=True)
class LineageWarning:
    kind: WarningKind
    shard_id: str
    parent_shard_id: str | None = None

    @property
    def message(self) -> str:
        if self.kind == "parent_looks_open":
            return (
                f"Parent shardId {self.parent_shard_id} is not closed, but child shard {self.shard_id} is "
                "listed (DescribeStream is eventually consistent; usually safe, retried at the next sync)"
            )
        return (
            f"shard {self.shard_id} is closed but no child shard is listed yet (DescribeStream is "
            "eventually consistent; retried at the next sync)"
        )


class ShardGraph:
    """Parents, children and open/closed state of the listed shards. Immutable once built."""

    __slots__ = ("_children", "_shards", "warnings")

    def __init__(self, shards: Iterable[Shard]) -> None:
        self._shards: dict[str, Shard] = {}
        for shard in shards:
            self._shards.setdefault(shard.shard_id, shard)  # paging can repeat a shard: first wins
        children: dict[str, list[str]] = {}
        for shard in self._shards.values():
            for parent_id in shard.parent_shard_ids:
                children.setdefault(parent_id, []).append(shard.shard_id)
        self._children = {parent: tuple(sorted(kids)) for parent, kids in children.items()}
        warnings: list[LineageWarning] = []
        for shard_id in sorted(self._shards):
            shard = self._shards[shard_id]
            for parent_id in shard.parent_shard_ids:
                parent = self._shards.get(parent_id)
                if parent is not None and parent.is_open:
                    warnings.append(LineageWarning("parent_looks_open", shard_id, parent.shard_id))
            if not shard.is_open and shard_id not in self._children:
                warnings.append(LineageWarning("closed_without_children", shard_id))
        self.warnings: tuple[LineageWarning, ...] = tuple(warnings)

    def __contains__(self, shard_id: object) -> bool:
        return shard_id in self._shards

    def __len__(self) -> int:
        return len(self._shards)

    @property
    def shards(self) -> Mapping[str, Shard]:
        return self._shards

    def shard(self, shard_id: str) -> Shard:
        return self._shards[shard_id]

    def parent_of(self, shard_id: str) -> str | None:
        """The (first) parent id as listed (the parent itself may be trimmed and unlisted)."""
        return self._shards[shard_id].parent_shard_id

    def parents_of(self, shard_id: str) -> tuple[str, ...]:
        """Every parent id as listed: two for a Kinesis merge's child."""
        return self._shards[shard_id].parent_shard_ids

    def children_of(self, shard_id: str) -> tuple[str, ...]:
        return self._children.get(shard_id, ())

    def is_open(self, shard_id: str) -> bool:
        return self._shards[shard_id].is_open

    def ancestors(self, shard_id: str) -> Iterator[str]:
        """Parents, grandparents, … — every id on the way up (all parents of each), listed or not,
        each once, stopping at a cycle."""
        seen = {shard_id}
        frontier = list(self._shards[shard_id].parent_shard_ids) if shard_id in self._shards else []
        while frontier:
            parent = frontier.pop(0)
            if parent in seen:
                continue
            yield parent
            seen.add(parent)
            if parent in self._shards:
                frontier.extend(self._shards[parent].parent_shard_ids)

    def descendants(self, shard_id: str) -> Iterator[str]:
        """Every listed shard below ``shard_id``, breadth first."""
        seen = {shard_id}
        frontier = list(self.children_of(shard_id))
        while frontier:
            child = frontier.pop(0)
            if child in seen:
                continue
            seen.add(child)
            yield child
            frontier.extend(self.children_of(child))

    def parents_first(self) -> tuple[str, ...]:
        """Every listed shard, each after its listed ancestors (ties by shard id, which starts with time)."""
        depth: dict[str, int] = {}
        for shard_id in self._shards:
            depth[shard_id] = sum(1 for a in self.ancestors(shard_id) if a in self._shards)
        return tuple(sorted(self._shards, key=lambda s: (depth[s], s)))

"""A model stream (rollovers and splits) and a model fleet (leases, processing) for the sync properties."""

from __future__ import annotations

from dataclasses import dataclass, field

from consumer.streams.source import Shard
from consumer.streams.sync import LeaseView, ShardSyncPlan, plan_shard_sync


@dataclass
class ModelShard:
    shard_id: str
    parent: str | None
    open: bool = True
    born_at: int = 0
    closed_at: int | None = None


@dataclass
class ModelStream:
    shards: dict[str, ModelShard] = field(default_factory=dict)
    step: int = 0
    _next: int = 0

    def _new(self, parent: str | None) -> str:
        self._next += 1
        shard_id = f"shardId-{self._next:08d}"
        self.shards[shard_id] = ModelShard(shard_id, parent, born_at=self.step)
        return shard_id

    def add_root(self) -> str:
        return self._new(None)

    def open_shards(self) -> list[str]:
        return sorted(s for s, m in self.shards.items() if m.open)

    def evolve(self, shard_id: str, split: bool) -> None:
        """Close a shard and give it one child (rollover) or two (split)."""
        self.step += 1
        shard = self.shards[shard_id]
        shard.open, shard.closed_at = False, self.step
        for _ in range(2 if split else 1):
            self._new(shard_id)

    def ancestors(self, shard_id: str) -> list[str]:
        out, parent = [], self.shards[shard_id].parent
        while parent is not None:
            out.append(parent)
            parent = self.shards[parent].parent
        return out

    def listing(self, hide_newest: bool = False, stale_close: bool = False) -> list[Shard]:
        """DescribeStream's view: optionally without the newest children or with the last close unseen."""
        listed = []
        for m in self.shards.values():
            if hide_newest and m.born_at == self.step and m.parent is not None:
                continue
            looks_open = m.open or (stale_close and m.closed_at == self.step)
            listed.append(Shard(m.shard_id, m.parent, "1", None if looks_open else "9"))
        return listed


@dataclass
class ModelFleet:
    """The leases table plus processing, with the history the properties are checked against."""

    stream: ModelStream
    initial_position: str
    cleanup: bool
    leases: dict[str, LeaseView] = field(default_factory=dict)
    ever_leased: dict[str, str] = field(default_factory=dict)  # shard → the checkpoint it was created at
    started_at: dict[str, int] = field(default_factory=dict)
    finished_at: dict[str, int] = field(default_factory=dict)
    syncs: int = 0
    clock: int = 0
    open_at_first_start: frozenset[str] = frozenset()
    listed_open_at_first_start: frozenset[str] = frozenset()

    def sync(
        self,
        hide_newest: bool = False,
        stale_close: bool = False,
        snapshot: tuple[LeaseView, ...] | None = None,
    ) -> ShardSyncPlan:
        """One sync; with ``snapshot``, a slow syncer that planned on an older scan and applies it now."""
        first = self.syncs == 0 and not self.leases and snapshot is None
        if first:
            self.open_at_first_start = frozenset(self.stream.open_shards())
        self.syncs += 1
        listing = self.stream.listing(hide_newest, stale_close)
        if first:
            self.listed_open_at_first_start = frozenset(s.shard_id for s in listing if s.is_open)
        plan = plan_shard_sync(
            listing,
            tuple(self.leases.values()) if snapshot is None else snapshot,
            self.initial_position,  # type: ignore[arg-type]
            first,
            self.cleanup,
        )
        for new in plan.leases_to_create:
            if new.shard_id in self.leases:
                continue  # create-if-absent: someone else created it since the scan
            assert new.shard_id not in self.ever_leased, f"{new.shard_id} leased a second time (replay)"
            if new.checkpoint == "LATEST":
                assert first, f"{new.shard_id} got LATEST after the first start"
                assert not any(a in self.ever_leased for a in self.stream.ancestors(new.shard_id))
            self.leases[new.shard_id] = LeaseView(new.shard_id, new.checkpoint, new.parent_shard_ids)
            self.ever_leased[new.shard_id] = new.checkpoint
        for shard_id in plan.leases_to_delete:
            if shard_id not in self.leases:
                continue  # already deleted by a faster syncer
            assert self.leases[shard_id].checkpoint == "SHARD_END", f"deleted unfinished {shard_id}"
            del self.leases[shard_id]
        for shard_id in self.leases:  # a child's lease never goes before its parent's (no leaked parents)
            for child, m in self.stream.shards.items():
                if m.parent == shard_id and child in self.ever_leased:
                    assert child in self.leases, f"{child}'s lease was deleted before its parent {shard_id}'s"
        return plan

    def processable(self) -> list[str]:
        ready = []
        for shard_id, lease in sorted(self.leases.items()):
            if lease.checkpoint == "SHARD_END":
                continue
            parents = lease.parent_shard_ids
            if all(p not in self.leases or self.leases[p].checkpoint == "SHARD_END" for p in parents):
                ready.append(shard_id)
        return ready

    def process(self, shard_id: str) -> None:
        """One batch: start reading, or read on; a closed shard read to its end checkpoints SHARD_END."""
        self.clock += 1
        lease = self.leases[shard_id]
        if lease.checkpoint in ("TRIM_HORIZON", "LATEST"):
            self.started_at[shard_id] = self.clock
            checkpoint = "1"
        elif not self.stream.shards[shard_id].open:
            checkpoint = "SHARD_END"
            self.finished_at[shard_id] = self.clock
        else:
            checkpoint = lease.checkpoint  # an open shard with nothing new: the checkpoint stays
        self.leases[shard_id] = LeaseView(shard_id, checkpoint, lease.parent_shard_ids)

    def quiesce(self, rounds: int = 60) -> None:
        for _ in range(rounds):
            before = (dict(self.leases), dict(self.finished_at))
            self.sync()
            for shard_id in self.processable():
                self.process(shard_id)
            if before == (dict(self.leases), dict(self.finished_at)):
                return
        raise AssertionError("the fleet never settled: a shard is blocked forever")

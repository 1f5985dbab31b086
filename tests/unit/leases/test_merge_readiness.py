"""A merge's child (two parents) starts only after both parents finished, even when it is leased (at
its first parent's end) before its other parent has a lease: a parent missing from the leases table
counts as finished only when no sibling parent has a lease, or once the child progressed.

The property test drives the real pieces -- the sync plan, shard-end discovery as the shard syncer
does it, the lease side's readiness and the shard consumer's parent check -- over random splits and
merges of a stream, in random interleavings, and checks that no shard starts before every parent of
it finished, and that everything still finishes in the end (no child waits for ever)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.decisions import parents_finished, waiting_parents
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.streams.source import Shard
from consumer.streams.sync import LeaseView, plan_shard_sync
from ground.clock import FakeClock
from ground.settings import WorkerSettings


def lease(shard_id: str, checkpoint: str, *parents: str) -> Lease:
    return Lease(shard_id, None, 0, ExtendedSequenceNumber(checkpoint), parent_shard_ids=frozenset(parents))


def table(*leases: Lease) -> dict[str, Lease]:
    return {item.shard_id: item for item in leases}


def test_a_merge_child_waits_for_its_other_parent_that_has_no_lease_yet() -> None:
    child = lease("m", "TRIM_HORIZON", "a", "b")
    assert not parents_finished(child, table(lease("a", "SHARD_END"), child))
    assert waiting_parents(("a", "b"), {"a": True}) == ("b",)
    assert not parents_finished(child, table(lease("a", "SHARD_END"), lease("b", "TRIM_HORIZON"), child))
    assert parents_finished(child, table(lease("a", "SHARD_END"), lease("b", "SHARD_END"), child))


def test_a_merge_child_with_neither_parent_leased_is_ready() -> None:
    """Both parents trimmed, cleaned up by the Java KCL, or closed before a LATEST start."""
    assert parents_finished(lease("m", "TRIM_HORIZON", "a", "b"), {})
    assert parents_finished(lease("m", "LATEST", "a", "b"), {})


def test_a_progressed_merge_child_stays_ready_while_its_parents_are_cleaned_up_one_by_one() -> None:
    child = lease("m", "250", "a", "b")
    assert parents_finished(child, table(lease("b", "SHARD_END"), child))
    assert not parents_finished(child, table(lease("b", "TRIM_HORIZON"), child))


def test_one_parent_is_judged_as_before() -> None:
    child = lease("c", "TRIM_HORIZON", "p")
    assert parents_finished(child, {})
    assert parents_finished(child, table(lease("p", "SHARD_END")))
    assert not parents_finished(child, table(lease("p", "17")))
    assert waiting_parents(("p",), {}) == ()


def test_the_shard_consumer_parent_check_reads_the_missing_parent_as_waited_for() -> None:
    store, clock = InMemoryLeaseStore(), FakeClock()
    coordinator = LeaseCoordinator(store, "w", WorkerSettings(), clock)
    store.create_if_absent(lease("a", "SHARD_END"))
    store.create_if_absent(lease("m", "TRIM_HORIZON", "a", "b"))
    assert coordinator.waiting_parents(("a", "b")) == ("b",)
    store.create_if_absent(lease("b", "TRIM_HORIZON"))
    assert coordinator.waiting_parents(("a", "b")) == ("b",)
    assert coordinator.waiting_parents(("x", "y")) == ()
    assert coordinator.waiting_parents(("a",)) == ()


# ------------------------------------------------------------------ the property


@dataclass
class World:
    """A stream that splits and merges, its leases table, and what has been processed."""

    shards: dict[str, Shard] = field(default_factory=lambda: {"s0": Shard("s0"), "s1": Shard("s1")})
    leases: dict[str, Lease] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    synced: bool = False
    made: int = 2

    def open_shards(self) -> list[str]:
        return sorted(s for s, shard in self.shards.items() if shard.is_open)

    def new_shard(self, parent: str, adjacent: str | None = None) -> None:
        name = f"s{self.made}"
        self.made += 1
        self.shards[name] = Shard(name, parent, "1", None, adjacent)

    def close(self, shard_id: str) -> None:
        shard = self.shards[shard_id]
        self.shards[shard_id] = Shard(
            shard_id, shard.parent_shard_id, "1", "9", shard.adjacent_parent_shard_id
        )

    def split(self, shard_id: str) -> None:
        self.close(shard_id)
        self.new_shard(shard_id)
        self.new_shard(shard_id)

    def merge(self, first: str, second: str) -> None:
        self.close(first)
        self.close(second)
        self.new_shard(first, second)

    def sync(self) -> None:
        """The fleet's listing (consumer.lifecycle.shard_sync.ShardSyncer.sync)."""
        views = [LeaseView.of(item) for item in self.leases.values()]
        plan = plan_shard_sync(self.shards.values(), views, "TRIM_HORIZON", not self.synced, True)
        self.synced = True
        for new in plan.leases_to_create:
            self.leases.setdefault(new.shard_id, lease(new.shard_id, new.checkpoint, *new.parent_shard_ids))
        for shard_id in plan.leases_to_delete:
            del self.leases[shard_id]

    def discover(self, parent_id: str) -> None:
        """A shard's end: its children leased naming every parent (ShardSyncer.sync_children)."""
        parent = self.leases.get(parent_id)
        if parent is None or not parent.finished:
            return
        for child in self.shards.values():
            if parent_id in child.parent_shard_ids:
                self.leases.setdefault(
                    child.shard_id, lease(child.shard_id, "TRIM_HORIZON", *child.parent_shard_ids)
                )

    def may_start(self, shard_id: str) -> bool:
        """The lease side calls it ready and the shard consumer's parent check passes."""
        item = self.leases[shard_id]
        leased = {p: self.leases[p].finished for p in item.parent_shard_ids if p in self.leases}
        return parents_finished(item, self.leases) and not waiting_parents(item.parent_shard_ids, leased)

    def start(self, shard_id: str) -> None:
        missing = [p for p in self.shards[shard_id].parent_shard_ids if p not in self.done]
        assert not missing, f"{shard_id} started before its parents {missing} finished"
        self.leases[shard_id] = lease(shard_id, "5", *self.leases[shard_id].parent_shard_ids)
        self.started.add(shard_id)

    def finish(self, shard_id: str) -> None:
        self.leases[shard_id] = lease(shard_id, "SHARD_END", *self.leases[shard_id].parent_shard_ids)
        self.done.add(shard_id)

    def startable(self) -> list[str]:
        return sorted(
            s
            for s, item in self.leases.items()
            if item.checkpoint.sequence == "TRIM_HORIZON" and self.may_start(s)
        )

    def finishable(self) -> list[str]:
        return sorted(
            s
            for s, item in self.leases.items()
            if s in self.started and not item.finished and not self.shards[s].is_open
        )

    def moves(self) -> list[tuple[str, ...]]:
        """Every step that would change something now."""
        opened = self.open_shards()
        found: list[tuple[str, ...]] = [("sync",)]
        if self.made < 14:
            found += [("split", s) for s in opened]
            found += [("merge", a, b) for a in opened for b in opened if a < b]
        found += [("start", s) for s in self.startable()]
        found += [("finish", s) for s in self.finishable()]
        found += [
            ("discover", s)
            for s, item in self.leases.items()
            if item.finished
            and any(s in c.parent_shard_ids and c.shard_id not in self.leases for c in self.shards.values())
        ]
        return sorted(found)

    def make(self, move: tuple[str, ...]) -> None:
        kind, *shards = move
        if kind == "sync":
            self.sync()
        elif kind == "merge":
            self.merge(shards[0], shards[1])
        else:
            getattr(self, kind)(shards[0])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_no_shard_starts_before_both_parents_and_every_shard_finishes(data: st.DataObject) -> None:
    world = World()
    for _ in range(data.draw(st.integers(0, 60), label="steps")):
        world.make(data.draw(st.sampled_from(world.moves())))
    # The fleet carries on without resharding: every shard is processed, closed ones to their end.
    world.made = 99
    for _ in range(4 * len(world.shards) + 4):
        world.sync()
        for shard_id in sorted(s for s, item in world.leases.items() if item.finished):
            world.discover(shard_id)
        for shard_id in world.startable():
            world.start(shard_id)
        for shard_id in world.finishable():
            world.finish(shard_id)
    assert world.started == set(world.shards)
    assert world.done == {s for s, shard in world.shards.items() if not shard.is_open}


def test_the_split_then_merge_that_leased_a_child_before_its_second_parent() -> None:
    """s1 splits (s2, s3), then s0 and s2 merge (s4); s0 ends and its end leases s4 naming s0 and s2
    before any listing has shown s2."""
    world = World()
    world.sync()
    world.split("s1")
    world.merge("s0", "s2")
    world.start("s0")
    world.finish("s0")
    world.discover("s0")
    assert set(world.leases) == {"s0", "s1", "s4"}
    assert "s4" not in world.startable()
    world.sync()
    assert "s2" in world.leases and "s4" not in world.startable()
    world.start("s1")
    world.finish("s1")
    world.sync()
    world.start("s2")
    world.finish("s2")
    assert "s4" in world.startable()

"""A shard's end leases its children; a merge's child (two parents) is leased naming both, whichever
parent ends first, so it waits for both (the lease side checks every parent)."""

from __future__ import annotations

from collections.abc import Iterable

from consumer.leases.memory import InMemoryLeaseStore
from consumer.streams.source import Shard
from ground.clock import FakeClock
from tests.unit.lifecycle.test_shard_discovery import finished, fleet_member, leases


class MergedStream:
    def __init__(self, shards: list[Shard]) -> None:
        self.shards = shards

    def list_shards(self) -> Iterable[Shard]:
        return list(self.shards)

    def list_children(self, shard_id: str) -> Iterable[Shard]:
        return [s for s in self.shards if s.shard_id != shard_id]  # an unfiltered answer: the syncer filters


def test_the_first_parent_to_end_leases_the_merged_child_naming_both_parents() -> None:
    for ended in ("A", "B"):
        store, clock = InMemoryLeaseStore(), FakeClock()
        stream = MergedStream(
            [
                Shard("A", ending_sequence_number="9"),
                Shard("B", ending_sequence_number="9"),
                Shard("M", "A", "10", None, "B"),
                Shard("Z", "other"),
            ]
        )
        store.create_if_absent(finished(ended))
        syncer = fleet_member(store, "a", clock, stream)  # type: ignore[arg-type]
        syncer.shard_ended(ended)
        syncer.sync_children_due()
        assert leases(store)["M"] == ("TRIM_HORIZON", frozenset({"A", "B"})), ended
        assert "Z" not in leases(store)

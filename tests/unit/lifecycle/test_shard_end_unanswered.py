"""The children of a shard whose SHARD_END reached the leases table after its shard consumer stopped.

The consumer reports a shard's end (and its owner looks up the children) when its SHARD_END
checkpoint is answered. When that answer is lost -- the write landed and the call timed out, or
was throttled -- and the lease is dropped before the consumer can try again (a fence, an overdue
hand-over), the consumer stops as if the lease were lost. The position is written later, or
found written, by the lease side; it tells its listeners the lease is ``finished`` and the worker
(wired by :func:`consumer.runtime.assembly.assemble`) looks the children up then. Before, nobody
did: the children waited for the sync leader's listing, which the three-round brownout bench of
6492bee saw fail for 180 s on an overloaded emulator while one key got no record (0c2b260).
Each test drives the worker's own parts on the in-memory table and a fake clock."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import pytest

from consumer.leases.errors import LeaseError, LeaseLostError
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.runtime.assembly import Parts, Ports, StreamPort, assemble
from consumer.streams.source import Shard
from ground.clock import FakeClock
from ground.positions import SHARD_END
from ground.settings import WorkerSettings
from tests.unit.leases.regression_rig import Hooked, table, throttled, timed_out_after_commit

SETTINGS = WorkerSettings(initial_position="TRIM_HORIZON")
CHILDREN = {"C1": ("TRIM_HORIZON", frozenset({"P"})), "C2": ("TRIM_HORIZON", frozenset({"P"}))}


class Stream:
    """P split into C1 and C2; the listings and children lookups are counted."""

    def __init__(self) -> None:
        self.shards = [Shard("P", ending_sequence_number="9"), Shard("C1", "P"), Shard("C2", "P")]
        self.listings = 0
        self.children_lookups = 0

    def list_shards(self) -> Iterable[Shard]:
        self.listings += 1
        return list(self.shards)

    def list_children(self, shard_id: str) -> Iterable[Shard]:
        self.children_lookups += 1
        return [s for s in self.shards if s.parent_shard_id == shard_id]


def worker(store: Hooked, clock: FakeClock, stream: Stream, name: str = "a") -> Parts:
    """A worker as the runtime assembles it (its threads not started), holding what it could take."""
    ports = Ports(leases=store, stream=cast(StreamPort, stream), processors=cast(Any, None), clock=clock)
    parts = assemble(SETTINGS, ports, name)
    assert parts.coordinator.heartbeat_once()
    parts.coordinator.take_round()
    return parts


def children(store: Hooked) -> dict[str, tuple[str, frozenset[str]]]:
    return {
        shard_id: (lease.checkpoint.sequence, lease.parent_shard_ids)
        for shard_id, lease in store.scan().leases.items()
        if shard_id != "P"
    }


def look_up_due(syncer: ShardSyncer, clock: FakeClock) -> None:
    """The children thread's passes while any lookup is due within a minute."""
    while (due := syncer.next_children_due()) is not None and due <= clock.monotonic_millis() + 60_000:
        clock.advance(max(0, due - clock.monotonic_millis()))
        syncer.sync_children_due()


def test_a_shard_end_that_landed_unanswered_before_the_fence_has_its_children_looked_up() -> None:
    """The bench's case: the SHARD_END write lands, its call times out, the fence drops the lease.
    The next round's attempt to record the position finds the lease finished by that write."""
    store, clock, stream = table("P"), FakeClock(), Stream()
    a = worker(store, clock, stream)
    store.hooks["checkpoint"] = timed_out_after_commit
    with pytest.raises(LeaseError):
        a.coordinator.checkpoint("P", SHARD_END)
    assert a.syncer.next_children_due() is None  # unanswered: nothing reported the end yet
    clock.advance(SETTINGS.fence_after_millis + 1)  # the outage lasts: fenced, the lease dropped
    assert a.coordinator.held() == []
    a.coordinator.take_round()
    look_up_due(a.syncer, clock)
    assert store.get("P").finished  # type: ignore[union-attr]
    assert children(store) == CHILDREN
    assert stream.listings == 0  # by the owner's lookup, not a listing


def test_a_shard_end_refused_for_now_and_recorded_after_the_fence_has_its_children_looked_up() -> None:
    """Throttled instead: nothing landed; the fenced worker records SHARD_END at its next round."""
    store, clock, stream = table("P"), FakeClock(), Stream()
    a = worker(store, clock, stream)
    store.hooks["checkpoint"] = throttled
    with pytest.raises(LeaseError):
        a.coordinator.checkpoint("P", SHARD_END)
    clock.advance(SETTINGS.fence_after_millis + 1)
    a.coordinator.take_round()
    look_up_due(a.syncer, clock)
    assert store.get("P").finished  # type: ignore[union-attr]
    assert children(store) == CHILDREN and stream.listings == 0


def test_a_shard_end_refused_by_an_overdue_hand_over_has_its_children_looked_up_by_the_release() -> None:
    """A thief asked for P; the hand-over ran overdue before the consumer's SHARD_END checkpoint, which
    is refused (the consumer stops) and written by the release that follows."""
    store, clock, stream = table("P"), FakeClock(), Stream()
    owner = worker(store, clock, stream, "owner")
    thief = worker(store, clock, stream, "thief")
    owner.coordinator.holdings.ask_hand_over("P", "thief", clock.wall_millis())  # due now
    step = SETTINGS.renewal_interval_millis // 2
    for _ in range(SETTINGS.fence_margin_millis // step + 2):
        clock.advance(step)
        assert owner.coordinator.heartbeat_once() and thief.coordinator.heartbeat_once()
    with pytest.raises(LeaseLostError, match="overdue"):
        owner.coordinator.checkpoint("P", SHARD_END)
    owner.coordinator.take_round()  # releases the overdue hand-over, SHARD_END recorded first
    look_up_due(owner.syncer, clock)
    assert store.get("P").finished  # type: ignore[union-attr]
    assert children(store) == CHILDREN and stream.listings == 0


def test_a_shard_end_answered_as_usual_is_looked_up_once_though_both_sides_report_it() -> None:
    """The usual case reports the end twice: the lease side's ``finished`` when the write is answered,
    then the shard consumer's end. One lookup (and its confirming look), as before."""
    store, clock, stream = table("P"), FakeClock(), Stream()
    a = worker(store, clock, stream)
    a.coordinator.checkpoint("P", SHARD_END)
    a.syncer.shard_ended("P")  # the shard consumer's report, right after
    look_up_due(a.syncer, clock)
    assert children(store) == CHILDREN
    assert stream.children_lookups == 2  # the lookup and the confirming look, nothing twice

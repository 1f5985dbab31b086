"""Worked examples of the shard graph and the sync plan (the properties are in test_sync_properties)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.streams.graph import ShardGraph
from consumer.streams.source import Position, Shard
from consumer.streams.sync import LeaseView, NewLease, plan_shard_sync


def closed(shard_id: str, parent: str | None = None) -> Shard:
    return Shard(shard_id, parent, "100", "200")


def opened(shard_id: str, parent: str | None = None) -> Shard:
    return Shard(shard_id, parent, "300")


def test_graph_lineage_and_parents_first_order() -> None:
    graph = ShardGraph([opened("d", "b"), closed("b", "a"), opened("c", "a"), closed("a", "gone")])
    assert graph.children_of("a") == ("b", "c")
    assert list(graph.ancestors("d")) == ["b", "a", "gone"]
    assert list(graph.descendants("a")) == ["b", "c", "d"]
    assert graph.parents_first() == ("a", "b", "c", "d")
    assert graph.warnings == ()  # an unlisted (trimmed) parent is normal


def test_eventual_consistency_is_a_warning_never_an_exception() -> None:
    graph = ShardGraph([closed("a"), opened("b"), opened("c", "b")])
    kinds = {(w.kind, w.shard_id) for w in graph.warnings}
    assert kinds == {("closed_without_children", "a"), ("parent_looks_open", "c")}
    (looks_open,) = [w for w in graph.warnings if w.kind == "parent_looks_open"]
    assert "Parent shardId b is not closed" in looks_open.message


def test_first_start_latest_only_for_open_shards_without_leased_ancestors() -> None:
    shards = [closed("a"), opened("b", "a"), opened("x"), opened("y", "x")]  # y listed while x looks open
    plan = plan_shard_sync(shards, (), "LATEST", first_start=True, cleanup=True)
    assert plan.leases_to_create == (
        NewLease("x", "LATEST", frozenset()),
        NewLease("b", "LATEST", frozenset({"a"})),
        NewLease("y", "TRIM_HORIZON", frozenset({"x"})),
    )
    assert [w.kind for w in plan.warnings] == ["parent_looks_open"]


def test_after_first_start_every_new_shard_starts_at_trim_horizon_parents_first() -> None:
    leases = [LeaseView("b", "1234", frozenset({"a"}))]
    shards = [closed("a"), closed("b", "a"), opened("c", "b"), opened("d", "b")]
    plan = plan_shard_sync(shards, leases, "LATEST", first_start=False, cleanup=True)
    assert [(n.shard_id, n.checkpoint) for n in plan.leases_to_create] == [
        ("c", "TRIM_HORIZON"),
        ("d", "TRIM_HORIZON"),
    ]
    assert plan.leases_to_delete == ()  # "a" has no lease; "b" is not finished


def test_readable_parent_of_a_waiting_child_gets_a_lease() -> None:
    leases = [LeaseView("c", "TRIM_HORIZON", frozenset({"b"}))]
    plan = plan_shard_sync([closed("b"), opened("c", "b")], leases, "LATEST", first_start=False, cleanup=True)
    assert plan.leases_to_create == (NewLease("b", "TRIM_HORIZON", frozenset()),)


def test_shard_whose_children_have_started_is_never_leased_again() -> None:
    leases = [LeaseView("c", "555", frozenset({"b"}))]
    plan = plan_shard_sync(
        [closed("b"), opened("c", "b")], leases, "TRIM_HORIZON", first_start=False, cleanup=True
    )
    assert plan.leases_to_create == ()


def test_cleanup_waits_for_every_child_to_progress_and_the_parents_to_go() -> None:
    shards = [closed("a"), closed("b", "a"), opened("c", "b"), opened("d", "b")]
    base = {
        "a": LeaseView("a", "SHARD_END"),
        "b": LeaseView("b", "SHARD_END", frozenset({"a"})),
        "c": LeaseView("c", "700", frozenset({"b"})),
        "d": LeaseView("d", "TRIM_HORIZON", frozenset({"b"})),
    }
    plan = plan_shard_sync(shards, base.values(), "TRIM_HORIZON", first_start=False, cleanup=True)
    assert plan.leases_to_delete == ("a",)  # b waits: d has not progressed, and a is still there
    progressed = {**base, "d": LeaseView("d", "701", frozenset({"b"}))}
    plan = plan_shard_sync(shards, progressed.values(), "TRIM_HORIZON", first_start=False, cleanup=True)
    assert plan.leases_to_delete == ("a",)  # b still waits for its parent's lease to go
    del progressed["a"]
    plan = plan_shard_sync(shards, progressed.values(), "TRIM_HORIZON", first_start=False, cleanup=True)
    assert plan.leases_to_delete == ("b",)
    plan = plan_shard_sync(shards, progressed.values(), "TRIM_HORIZON", first_start=False, cleanup=False)
    assert plan.leases_to_delete == ()


def test_lease_view_from_a_lease_model() -> None:
    from consumer.leases.model import ExtendedSequenceNumber, Lease

    lease = Lease("s", "w", 3, ExtendedSequenceNumber("SHARD_END"), parent_shard_ids=frozenset({"p"}))
    assert LeaseView.of(lease) == LeaseView("s", "SHARD_END", frozenset({"p"}))


def test_positions() -> None:
    assert Position.from_checkpoint("TRIM_HORIZON") == Position.trim_horizon()
    assert Position.from_checkpoint("LATEST") == Position.latest()
    assert Position.from_checkpoint("123") == Position("AFTER_SEQUENCE_NUMBER", "123")
    assert Position.at("5").type == "AT_SEQUENCE_NUMBER"
    with pytest.raises(ValueError, match="no stream position"):
        Position.from_checkpoint("SHARD_END")
    with pytest.raises(ValueError, match="sequence number of digits"):
        Position.after("12a")
    with pytest.raises(ValueError, match="initial_position"):
        plan_shard_sync([], [], "AT_TIMESTAMP", first_start=True, cleanup=False)  # type: ignore[arg-type]


shard_ids = st.sampled_from([f"shardId-{i:03d}" for i in range(12)])
listings = st.lists(
    st.builds(
        lambda sid, parent, is_open: Shard(sid, parent, "1", None if is_open else "9"),
        shard_ids,
        st.one_of(st.none(), shard_ids, st.just("shardId-trimmed")),
        st.booleans(),
    ),
    max_size=15,
)


def _has_cycle(graph: ShardGraph) -> bool:
    for start in graph.shards:
        seen, current = {start}, graph.parent_of(start)
        while current is not None and current in graph:
            if current in seen:
                return True
            seen.add(current)
            current = graph.parent_of(current)
    return False


@settings(max_examples=200, deadline=None)
@given(listing=listings, initial=st.sampled_from(["TRIM_HORIZON", "LATEST"]), first=st.booleans())
def test_any_listing_even_nonsense_plans_without_raising(
    listing: list[Shard], initial: str, first: bool
) -> None:
    """Duplicates, self-parents and cycles included: DescribeStream's output never fails a sync."""
    graph = ShardGraph(listing)
    order = graph.parents_first()
    assert sorted(order) == sorted(graph.shards)
    position = {s: i for i, s in enumerate(order)}
    if not _has_cycle(graph):  # with a cycle there is no parents-first order; only "no exception" holds
        for shard_id in order:
            assert all(position[a] < position[shard_id] for a in graph.ancestors(shard_id) if a in graph)
    plan = plan_shard_sync(listing, (), initial, first, cleanup=True)  # type: ignore[arg-type]
    assert len({n.shard_id for n in plan.leases_to_create}) == len(plan.leases_to_create)

"""Lineage with two parents (a Kinesis merge) in the shard graph and the sync plan: the child descends
from both, is leased after both with both as its parents, keeps either parent from being leased again
once it started, and lets both be cleaned up only once it progressed."""

from __future__ import annotations

from consumer.streams.graph import ShardGraph
from consumer.streams.kinesis import KinesisShard
from consumer.streams.source import Shard
from consumer.streams.sync import LeaseView, NewLease, plan_shard_sync


def closed(shard_id: str, parent: str | None = None, adjacent: str | None = None) -> Shard:
    return Shard(shard_id, parent, "100", "200", adjacent)


def opened(shard_id: str, parent: str | None = None, adjacent: str | None = None) -> Shard:
    return Shard(shard_id, parent, "300", None, adjacent)


# a and b merge into m; m splits into x and y.
LINEAGE = [closed("a"), closed("b"), closed("m", "a", "b"), opened("x", "m"), opened("y", "m")]


def test_the_graph_follows_both_parents() -> None:
    graph = ShardGraph(reversed(LINEAGE))
    assert graph.children_of("a") == graph.children_of("b") == ("m",)
    assert graph.parents_of("m") == ("a", "b") and graph.parent_of("m") == "a"
    assert list(graph.ancestors("x")) == ["m", "a", "b"]
    assert set(graph.descendants("b")) == {"m", "x", "y"}
    assert graph.parents_first() == ("a", "b", "m", "x", "y")
    assert graph.warnings == ()


def test_a_merge_listed_while_both_parents_look_open_warns_for_each() -> None:
    graph = ShardGraph([opened("a"), opened("b"), opened("m", "a", "b")])
    assert {(w.kind, w.shard_id, w.parent_shard_id) for w in graph.warnings} == {
        ("parent_looks_open", "m", "a"),
        ("parent_looks_open", "m", "b"),
    }


def test_the_merged_child_is_leased_after_both_parents_naming_both() -> None:
    plan = plan_shard_sync(LINEAGE, (), "TRIM_HORIZON", first_start=True, cleanup=True)
    assert plan.leases_to_create == (
        NewLease("a", "TRIM_HORIZON", frozenset()),
        NewLease("b", "TRIM_HORIZON", frozenset()),
        NewLease("m", "TRIM_HORIZON", frozenset({"a", "b"})),
        NewLease("x", "TRIM_HORIZON", frozenset({"m"})),
        NewLease("y", "TRIM_HORIZON", frozenset({"m"})),
    )


def test_latest_first_start_leases_only_the_open_shards() -> None:
    plan = plan_shard_sync(LINEAGE, (), "LATEST", first_start=True, cleanup=True)
    assert [(n.shard_id, n.checkpoint) for n in plan.leases_to_create] == [("x", "LATEST"), ("y", "LATEST")]


def test_a_started_merge_child_keeps_either_parent_from_being_leased_again() -> None:
    leases = [LeaseView("m", "250", frozenset({"a", "b"}))]
    plan = plan_shard_sync(LINEAGE[:3], leases, "TRIM_HORIZON", first_start=False, cleanup=True)
    assert plan.leases_to_create == ()
    waiting = [LeaseView("m", "TRIM_HORIZON", frozenset({"a", "b"}))]
    plan = plan_shard_sync(LINEAGE[:3], waiting, "TRIM_HORIZON", first_start=False, cleanup=True)
    assert [n.shard_id for n in plan.leases_to_create] == ["a", "b"]  # still readable: read them first


def test_both_parents_are_cleaned_up_once_the_child_progressed_and_not_before() -> None:
    parents = [LeaseView("a", "SHARD_END"), LeaseView("b", "SHARD_END")]
    waiting = LeaseView("m", "TRIM_HORIZON", frozenset({"a", "b"}))
    plan = plan_shard_sync(LINEAGE[:3], [*parents, waiting], "TRIM_HORIZON", first_start=False, cleanup=True)
    assert plan.leases_to_delete == ()
    started = LeaseView("m", "250", frozenset({"a", "b"}))
    plan = plan_shard_sync(LINEAGE[:3], [*parents, started], "TRIM_HORIZON", first_start=False, cleanup=True)
    assert plan.leases_to_delete == ("a", "b")
    finished_child = [LeaseView("a", "SHARD_END"), LeaseView("m", "SHARD_END", frozenset({"a", "b"}))]
    children = [LeaseView("x", "7", frozenset({"m"})), LeaseView("y", "8", frozenset({"m"}))]
    plan = plan_shard_sync(
        LINEAGE, [*finished_child, *children], "TRIM_HORIZON", first_start=False, cleanup=True
    )
    assert plan.leases_to_delete == ("a",)  # m waits: its parent a still has a lease


def test_kinesis_shards_keep_both_parents_on_the_port() -> None:
    merged = KinesisShard("m", ("a", "b"), (0, 9), "300")
    assert merged.as_shard() == Shard("m", "a", "300", None, "b")
    assert merged.as_shard().parent_shard_ids == ("a", "b")
    assert KinesisShard("a").as_shard() == Shard("a")


def test_the_listings_second_parent_holds_a_finished_child_as_the_leases_own_parents_do() -> None:
    leases = [
        LeaseView("b", "SHARD_END"),
        LeaseView("m", "SHARD_END"),  # its parents only in the listing
        LeaseView("x", "7", frozenset({"m"})),
        LeaseView("y", "8", frozenset({"m"})),
    ]
    plan = plan_shard_sync(LINEAGE, leases, "TRIM_HORIZON", first_start=False, cleanup=True)
    assert plan.leases_to_delete == ("b",)  # m waits for b, its adjacent parent, to be gone

"""Shard sync planning over random lineages (rollovers and splits, several generations)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.lifecycle.shard_sync import plan_sync


@st.composite
def lineages(draw: st.DrawFn) -> list[dict[str, object]]:
    """Roots, then each generation either rolls a shard over (one child) or splits it (two)."""
    shards: list[dict[str, object]] = []
    frontier = [f"shardId-r{i}" for i in range(draw(st.integers(1, 4)))]
    for root in frontier:
        shards.append({"ShardId": root, "SequenceNumberRange": {"StartingSequenceNumber": "1"}})
    for generation in range(draw(st.integers(1, 3))):
        nxt = []
        for parent in frontier:
            for k in range(draw(st.sampled_from([1, 2]))):
                child = f"{parent}-{generation}{k}"
                shards.append(
                    {
                        "ShardId": child,
                        "ParentShardId": parent,
                        "SequenceNumberRange": {"StartingSequenceNumber": "2"},
                    }
                )
                nxt.append(child)
            next(s for s in shards if s["ShardId"] == parent)["SequenceNumberRange"][
                "EndingSequenceNumber"
            ] = "9"  # type: ignore[index]
        frontier = nxt
    return shards


@given(lineages(), st.sampled_from(["TRIM_HORIZON", "LATEST"]))
@settings(max_examples=100)
def test_first_start(shards: list[dict[str, object]], position: str) -> None:
    plan = plan_sync(shards, {}, initial_position=position, cleanup=True)
    created = {lease.shard_id: lease for lease in plan.create}
    open_ids = {s["ShardId"] for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]}  # type: ignore[operator]
    if position == "TRIM_HORIZON":
        assert set(created) == {s["ShardId"] for s in shards}  # every readable shard, from the oldest
        assert all(lease.checkpoint.sequence == "TRIM_HORIZON" for lease in created.values())
    else:
        assert set(created) == open_ids  # only what is open now, from now on
    for shard in shards:
        if shard["ShardId"] in created and shard.get("ParentShardId"):
            assert created[shard["ShardId"]].parent_shard_ids == {shard["ParentShardId"]}


@given(lineages())
@settings(max_examples=100)
def test_later_shards_always_start_at_trim_horizon(shards: list[dict[str, object]]) -> None:
    # At first start only the first root existed, still open; everything else appeared later.
    root = {"ShardId": shards[0]["ShardId"], "SequenceNumberRange": {"StartingSequenceNumber": "1"}}
    first = plan_sync([root], {}, initial_position="LATEST", cleanup=False)
    assert [lease.checkpoint.sequence for lease in first.create] == ["LATEST"]
    leases = {lease.shard_id: lease for lease in first.create}
    later = plan_sync(shards, leases, initial_position="LATEST", cleanup=False)
    assert all(lease.checkpoint.sequence == "TRIM_HORIZON" for lease in later.create)
    assert {lease.shard_id for lease in later.create} == {s["ShardId"] for s in shards} - set(leases)


def lease(shard: str, checkpoint: str, parents: tuple[str, ...] = ()) -> Lease:
    return Lease(shard, None, 1, ExtendedSequenceNumber(checkpoint), parent_shard_ids=frozenset(parents))


def test_cleanup_waits_for_children_progress_and_parents_gone() -> None:
    shards = [
        {"ShardId": "p", "SequenceNumberRange": {"EndingSequenceNumber": "9"}},
        {"ShardId": "c1", "ParentShardId": "p", "SequenceNumberRange": {}},
        {"ShardId": "c2", "ParentShardId": "p", "SequenceNumberRange": {}},
    ]
    leases = {
        "p": lease("p", "SHARD_END"),
        "c1": lease("c1", "TRIM_HORIZON", ("p",)),
        "c2": lease("c2", "500", ("p",)),
    }
    assert plan_sync(shards, leases, initial_position="LATEST", cleanup=True).delete == ()  # c1 has not moved
    leases["c1"] = lease("c1", "100", ("p",))
    assert [
        x.shard_id for x in plan_sync(shards, leases, initial_position="LATEST", cleanup=True).delete
    ] == ["p"]
    assert plan_sync(shards, leases, initial_position="LATEST", cleanup=False).delete == ()
    leases["gp"] = lease("gp", "SHARD_END")
    leases["p"] = lease("p", "SHARD_END", ("gp",))
    deleted = [x.shard_id for x in plan_sync(shards, leases, initial_position="LATEST", cleanup=True).delete]
    assert "p" not in deleted  # its own parent's lease still exists


def test_child_listed_before_parent_closes_is_noted_not_fatal() -> None:
    shards = [
        {"ShardId": "p", "SequenceNumberRange": {}},
        {"ShardId": "c", "ParentShardId": "p", "SequenceNumberRange": {}},
    ]
    plan = plan_sync(shards, {"p": lease("p", "100")}, initial_position="LATEST", cleanup=True)
    assert plan.open_parents == (("c", "p"),)
    assert [x.shard_id for x in plan.create] == ["c"]

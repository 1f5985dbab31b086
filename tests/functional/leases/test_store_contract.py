"""One contract, two stores: every conditional write and every conflict path, against moto's
DynamoDB and against the in-memory store the simulations use."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.errors import (
    CheckpointRefusedError,
    HeartbeatConflictError,
    LeaseConflictError,
    LeaseLostError,
    LineageChangedError,
)
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease
from ground.settings import WorkerSettings

ESN = ExtendedSequenceNumber


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[DynamoDBLeaseStore | InMemoryLeaseStore]:
    if request.param == "memory":
        yield InMemoryLeaseStore()
        return
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        ddb = DynamoDBLeaseStore(client, "leases")
        ddb.ensure_table(WorkerSettings())
        yield ddb


def fresh(shard: str = "shardId-1", checkpoint: str = "TRIM_HORIZON") -> Lease:
    return Lease(shard, None, 0, ESN(checkpoint), parent_shard_ids=frozenset({"shardId-0"}))


def test_create_is_idempotent_and_never_overwrites(store) -> None:  # type: ignore[no-untyped-def]
    assert store.create_if_absent(fresh())
    taken = store.take(fresh(), "a")
    assert not store.create_if_absent(fresh())
    assert store.get("shardId-1") == taken
    assert store.get("shardId-1").parent_shard_ids == {"shardId-0"}


def test_take_racing_take_has_one_winner(store) -> None:  # type: ignore[no-untyped-def]
    store.create_if_absent(fresh())
    seen = store.scan().leases["shardId-1"]
    winner = store.take(seen, "a")
    with pytest.raises(LeaseConflictError) as info:
        store.take(seen, "b")
    assert info.value.current == winner  # ALL_OLD: the conflict names the current owner, no second read
    assert winner.owner == "a" and winner.counter == 1 and winner.owner_switches_since_checkpoint == 1


def test_checkpoint_after_loss_is_refused(store) -> None:  # type: ignore[no-untyped-def]
    store.create_if_absent(fresh())
    mine = store.take(fresh(), "a")
    mine = store.checkpoint(mine, ESN("100"))
    store.take(store.get("shardId-1"), "b")  # b takes it (say a's heartbeat expired)
    with pytest.raises(LeaseLostError):
        store.checkpoint(mine, ESN("200"))
    assert store.get("shardId-1").checkpoint == ESN("100")


def test_checkpoint_never_moves_backwards_nor_reopens_shard_end(store) -> None:  # type: ignore[no-untyped-def]
    store.create_if_absent(fresh())
    mine = store.checkpoint(store.take(fresh(), "a"), ESN("500"))
    with pytest.raises(CheckpointRefusedError):
        store.checkpoint(mine, ESN("400"))
    with pytest.raises(CheckpointRefusedError):
        store.checkpoint(mine, ESN("TRIM_HORIZON"))
    done = store.checkpoint(mine, ESN("SHARD_END"))
    with pytest.raises(CheckpointRefusedError):
        store.checkpoint(done, ESN("600"))
    # Even a stale copy that does not know about SHARD_END cannot reopen it.
    with pytest.raises(LeaseLostError):
        store.checkpoint(mine, ESN("600"))
    assert store.get("shardId-1").checkpoint == ESN("SHARD_END")


def test_steal_request_then_hand_over(store) -> None:  # type: ignore[no-untyped-def]
    store.create_if_absent(fresh())
    held = store.take(fresh(), "a")
    marked = store.request_steal(held, "b", 1234)
    assert marked.pending_owner == "b" and marked.pending_since == 1234
    with pytest.raises(LeaseConflictError):
        store.request_steal(held, "c", 1235)  # one pending request at a time
    handed = store.release(marked, to="b")
    assert (handed.owner, handed.counter, handed.pending_owner) == ("b", 2, None)
    with pytest.raises(LeaseLostError):
        store.release(held)  # a's view is stale now


def test_renew_after_steal_and_release_frees(store) -> None:  # type: ignore[no-untyped-def]
    store.create_if_absent(fresh())
    held = store.take(fresh(), "a")
    freed = store.release(held)
    assert freed.owner is None and freed.counter == held.counter + 1
    again = store.take(freed, "b")
    with pytest.raises(LeaseLostError):
        store.checkpoint(held, ESN("1"))
    assert again.owner == "b"


def test_heartbeats_are_conditional(store) -> None:  # type: ignore[no-untyped-def]
    store.heartbeat(Heartbeat("a", 1, 1000), None)
    with pytest.raises(HeartbeatConflictError) as twice:
        store.heartbeat(Heartbeat("a", 1, 1000), None)  # the row exists: registering twice is a conflict
    assert twice.value.current == Heartbeat("a", 1, 1000)  # the row as it is: no second read needed
    store.heartbeat(Heartbeat("a", 2, 2000), 1)
    with pytest.raises(HeartbeatConflictError) as stale:
        store.heartbeat(Heartbeat("a", 3, 3000), 1)  # stale expectation
    assert stale.value.current == Heartbeat("a", 2, 2000)
    assert store.get_heartbeat("a") == Heartbeat("a", 2, 2000)  # consistent read of one row
    with pytest.raises(LeaseConflictError):
        store.delete_heartbeat(Heartbeat("a", 1, 1000))  # it has beaten since: not dead
    store.delete_heartbeat(Heartbeat("a", 2, 2000))
    assert "a" not in store.scan().heartbeats
    assert store.get_heartbeat("a") is None
    with pytest.raises(HeartbeatConflictError) as gone:
        store.heartbeat(Heartbeat("a", 3, 3000), 2)  # my row was removed: the conflict says so
    assert gone.value.current is None


def test_hand_over_requests_ride_on_the_owners_heartbeat(store) -> None:  # type: ignore[no-untyped-def]
    assert store.heartbeat(Heartbeat("owner-1", 1, 1000), None) == ()
    store.ask_hand_over("owner-1", HandOverRequest("shardId-7", "thief 2", 1500))
    store.ask_hand_over("owner-1", HandOverRequest("shardId-3", "thief-3", 1400))
    with pytest.raises(LeaseConflictError):
        store.ask_hand_over("nobody", HandOverRequest("shardId-7", "thief 2", 1500))  # no row: no ask
    assert "nobody" not in store.scan().heartbeats
    requests = store.heartbeat(Heartbeat("owner-1", 2, 2000), 1)
    assert requests == (
        HandOverRequest("shardId-3", "thief-3", 1400),
        HandOverRequest("shardId-7", "thief 2", 1500),
    )
    # They stay on the row until the owner clears them: an answer lost to a retry loses none.
    assert store.heartbeat(Heartbeat("owner-1", 3, 3000), 2) == requests
    with pytest.raises(HeartbeatConflictError) as retried:
        store.heartbeat(Heartbeat("owner-1", 3, 3000), 2)  # botocore's retry of a write that landed
    assert retried.value.current == Heartbeat("owner-1", 3, 3000) and retried.value.requests == requests
    assert store.heartbeat(Heartbeat("owner-1", 4, 4000), 3, clear=["shardId-3"]) == requests[1:]
    assert store.heartbeat(Heartbeat("owner-1", 5, 5000), 4, clear=["shardId-7"]) == ()
    beat = store.scan().heartbeats["owner-1"]
    assert (beat.counter, beat.at_wall_millis) == (5, 5000)


def test_only_finished_leases_are_deleted(store) -> None:  # type: ignore[no-untyped-def]
    store.create_if_absent(fresh())
    held = store.take(fresh(), "a")
    with pytest.raises(LeaseConflictError):
        store.delete_finished(held)
    store.delete_finished(store.checkpoint(held, ESN("SHARD_END")))
    assert store.get("shardId-1") is None


def test_a_create_planned_before_a_cleanup_is_refused_and_one_planned_after_lands(store) -> None:  # type: ignore[no-untyped-def]
    before = store.lineage_generation()
    assert before == 0  # no cleanup yet: the lineage row does not exist
    assert store.create_if_absent(fresh(), before)
    store.delete_finished(store.checkpoint(store.take(fresh(), "a"), ESN("SHARD_END")))
    after = store.lineage_generation()
    assert after > before
    with pytest.raises(LineageChangedError):
        store.create_if_absent(fresh(), before)  # planned from a view that predates the cleanup
    assert store.get("shardId-1") is None
    assert store.create_if_absent(fresh("shardId-2"), after)
    assert not store.create_if_absent(fresh("shardId-2"), after)  # exists: False, not a lineage error
    snapshot = store.scan()
    assert set(snapshot.leases) == {"shardId-2"} and not snapshot.heartbeats and not snapshot.malformed


def test_scan_pages_through_many_items(store) -> None:  # type: ignore[no-untyped-def]
    for i in range(300):
        store.create_if_absent(fresh(f"shardId-{i:04d}"))
    store.heartbeat(Heartbeat("w", 1, 1), None)
    snapshot = store.scan()
    assert len(snapshot.leases) == 300 and set(snapshot.heartbeats) == {"w"}


def test_first_start_is_claimed_once_and_the_marker_is_not_a_lease(store) -> None:  # type: ignore[no-untyped-def]
    assert not store.scan().first_start_claimed
    assert store.claim_first_start("a", 1_000)
    assert not store.claim_first_start("b", 1_001)
    snapshot = store.scan()
    assert snapshot.first_start_claimed
    assert snapshot.leases == {} and snapshot.heartbeats == {} and snapshot.malformed == ()

"""Lease items in KCL's format, checkpoint order, and malformed items."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.leases.errors import LeaseItemError
from consumer.leases.items import heartbeat_to_item, lease_from_item, lease_to_item, snapshot_from_items
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease

ESN = ExtendedSequenceNumber


def test_kcl_checkpoint_order() -> None:
    order = [
        ESN("AT_TIMESTAMP"),
        ESN("TRIM_HORIZON"),
        ESN("LATEST"),
        ESN("9"),
        ESN("10"),
        ESN("10", 3),
        ESN("SHARD_END"),
    ]
    assert sorted(reversed(order)) == order


def test_sequence_numbers_compare_as_integers_not_strings() -> None:
    assert ESN("9" * 21) < ESN("1" + "0" * 39)


def test_bad_checkpoint_text_is_rejected() -> None:
    with pytest.raises(ValueError, match="neither digits"):
        ESN("12abc")


leases = st.builds(
    Lease,
    shard_id=st.from_regex(r"shardId-[0-9]{5}", fullmatch=True),
    owner=st.one_of(st.none(), st.text(min_size=1, max_size=10)),
    counter=st.integers(0, 10**6),
    checkpoint=st.one_of(
        st.sampled_from([ESN("TRIM_HORIZON"), ESN("LATEST"), ESN("SHARD_END")]),
        st.builds(ESN, st.from_regex(r"[1-9][0-9]{20,39}", fullmatch=True), st.integers(0, 5)),
    ),
    owner_switches_since_checkpoint=st.integers(0, 100),
    parent_shard_ids=st.frozensets(st.from_regex(r"shardId-[0-9]{5}", fullmatch=True), max_size=2),
)


@given(leases)
def test_item_round_trip(lease: Lease) -> None:
    assert lease_from_item(lease_to_item(lease)) == lease


def test_a_java_kcl_item_is_read_with_its_checkpoint() -> None:
    item = {
        "leaseKey": {"S": "shardId-00000001700000000000-0a1b2c3d"},
        "leaseOwner": {"S": "ip-10-0-0-1:2a9f"},
        "leaseCounter": {"N": "1742"},
        "checkpoint": {"S": "4421584500000000017450439091"},
        "checkpointSubSequenceNumber": {"N": "0"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "parentShardId": {"SS": ["shardId-00000001690000000000-99999999"]},
        "leaseExtra": {"S": "an attribute we do not know is ignored"},
    }
    lease = lease_from_item(item)
    assert lease.checkpoint == ESN("4421584500000000017450439091")
    assert lease.counter == 1742 and lease.owner == "ip-10-0-0-1:2a9f"


@pytest.mark.parametrize(
    ("attribute", "value", "words"),
    [
        ("leaseCounter", {"S": "7"}, "has type S, expected N"),
        ("leaseCounter", {"N": "x"}, "expected an integer"),
        ("checkpoint", {"N": "5"}, "has type N, expected S"),
        ("checkpoint", {"S": "yesterday"}, "neither digits"),
        ("parentShardId", {"S": "shardId-1"}, "has type S, expected SS"),
    ],
)
def test_items_with_unexpected_types_name_the_attribute(
    attribute: str, value: dict[str, str], words: str
) -> None:
    item = lease_to_item(Lease("shardId-1", "w", 1, ESN("TRIM_HORIZON")))
    item[attribute] = value
    with pytest.raises(LeaseItemError, match=words) as info:
        lease_from_item(item)
    assert info.value.attribute == attribute


def test_snapshot_reports_malformed_items_instead_of_dropping_them() -> None:
    good = lease_to_item(Lease("shardId-1", None, 0, ESN("TRIM_HORIZON")))
    bad = {**lease_to_item(Lease("shardId-2", None, 0, ESN("TRIM_HORIZON"))), "leaseCounter": {"S": "oops"}}
    beat = heartbeat_to_item(Heartbeat("w1", 3, 1000, 1))
    snapshot = snapshot_from_items([good, bad], [beat])
    assert set(snapshot.leases) == {"shardId-1"}
    assert set(snapshot.heartbeats) == {"w1"}
    assert [m.key for m in snapshot.malformed] == ["shardId-2"]
    assert "leaseCounter" in snapshot.malformed[0].problem

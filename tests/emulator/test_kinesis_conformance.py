"""Conformance of the emulator's Kinesis, through boto3: records, iterators, reads, resharding and
listing, every successful answer checked against botocore's output shapes (kinesis_shapes.py), and
the lineage of a reshard compared with moto's Kinesis, which agrees with AWS on shard ids, parents
and hash-key ranges. Limits, retention, expiry and bad requests: test_kinesis_limits.py."""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from emulator.testing import RunningEmulator
from tests.emulator.kinesis_shapes import ShapeRecorder

_names = itertools.count()


@pytest.fixture
def kinesis(emulator: RunningEmulator) -> Iterator[Any]:
    client = emulator.client("kinesis")
    recorder = ShapeRecorder(client)
    yield client
    assert recorder.checked, "no successful response was checked"
    assert recorder.found == []


def new_stream(kinesis: Any, shards: int = 2) -> str:
    name = f"k{next(_names)}"
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    return name


def shards_of(kinesis: Any, name: str, **extra: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    page = kinesis.list_shards(StreamName=name, **extra)
    while True:
        found.extend(page["Shards"])
        if "NextToken" not in page:
            return found
        page = kinesis.list_shards(NextToken=page["NextToken"])


def read_all(
    kinesis: Any, name: str, shard_id: str, **position: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every record from the position to the shard's end (closed) or tip (open), and the last answer."""
    position = position or {"ShardIteratorType": "TRIM_HORIZON"}
    iterator = kinesis.get_shard_iterator(StreamName=name, ShardId=shard_id, **position)["ShardIterator"]
    records: list[dict[str, Any]] = []
    while True:
        answer = kinesis.get_records(ShardIterator=iterator)
        records.extend(answer["Records"])
        iterator = answer.get("NextShardIterator")
        if iterator is None or not answer["Records"]:
            return records, answer


def owner(shards: list[dict[str, Any]], key: str) -> str:
    point = int.from_bytes(hashlib.md5(key.encode()).digest(), "big")
    (found,) = [
        s["ShardId"]
        for s in shards
        if "EndingSequenceNumber" not in s["SequenceNumberRange"]
        and int(s["HashKeyRange"]["StartingHashKey"]) <= point <= int(s["HashKeyRange"]["EndingHashKey"])
    ]
    return found


def covers_the_space(open_shards: list[dict[str, Any]]) -> bool:
    ranges = sorted(
        (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
        for s in open_shards
    )
    return (
        ranges[0][0] == 0
        and ranges[-1][1] == 2**128 - 1
        and all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
    )


def test_create_describe_and_initial_shards_cover_the_hash_space(kinesis: Any) -> None:
    name = new_stream(kinesis, shards=3)
    summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    assert summary["StreamStatus"] == "ACTIVE" and summary["OpenShardCount"] == 3
    assert summary["RetentionPeriodHours"] == 24
    assert summary["StreamARN"] == f"arn:aws:kinesis:us-east-1:123456789012:stream/{name}"
    shards = shards_of(kinesis, name)
    assert [s["ShardId"] for s in shards] == [f"shardId-00000000000{i}" for i in range(3)]
    assert covers_the_space(shards)
    assert name in kinesis.list_streams()["StreamNames"]
    by_arn = kinesis.list_shards(StreamARN=summary["StreamARN"])["Shards"]
    assert by_arn == shards
    kinesis.create_stream(StreamName=f"{name}-od", StreamModeDetails={"StreamMode": "ON_DEMAND"})
    on_demand = kinesis.describe_stream_summary(StreamName=f"{name}-od")["StreamDescriptionSummary"]
    assert on_demand["StreamModeDetails"] == {"StreamMode": "ON_DEMAND"} and on_demand["OpenShardCount"] == 4


def test_records_go_to_the_shard_of_their_key_in_order(kinesis: Any) -> None:
    name = new_stream(kinesis, shards=2)
    shards = shards_of(kinesis, name)
    written: dict[str, list[tuple[str, bytes, str]]] = {}
    for i in range(20):
        key, data = f"key-{i % 7}", f"payload {i}".encode() + bytes([0, 255, i])
        answer = kinesis.put_record(StreamName=name, Data=data, PartitionKey=key)
        assert answer["ShardId"] == owner(shards, key)
        written.setdefault(answer["ShardId"], []).append((answer["SequenceNumber"], data, key))
    batch = kinesis.put_records(
        StreamName=name,
        Records=[
            {"Data": b"explicit", "PartitionKey": "any", "ExplicitHashKey": str(2**128 - 1)},
            {"Data": b"", "PartitionKey": "empty"},
        ],
    )
    assert batch["FailedRecordCount"] == 0
    assert batch["Records"][0]["ShardId"] == shards[-1]["ShardId"]  # the top of the space
    for entry, (data, key) in zip(batch["Records"], ((b"explicit", "any"), (b"", "empty")), strict=True):
        written.setdefault(entry["ShardId"], []).append((entry["SequenceNumber"], data, key))
    for shard_id, expected in written.items():
        records, last = read_all(kinesis, name, shard_id)
        assert [(r["SequenceNumber"], r["Data"], r["PartitionKey"]) for r in records] == expected
        numbers = [int(r["SequenceNumber"]) for r in records]
        assert numbers == sorted(numbers) and all(len(str(n)) == 56 for n in numbers)
        assert last["MillisBehindLatest"] == 0 and "NextShardIterator" in last  # open shard: at its tip


def test_iterator_types_and_paging(kinesis: Any) -> None:
    name = new_stream(kinesis, shards=1)
    shard = shards_of(kinesis, name)[0]["ShardId"]
    numbers = [
        kinesis.put_record(StreamName=name, Data=b"%d" % i, PartitionKey="p")["SequenceNumber"]
        for i in range(6)
    ]
    latest = kinesis.get_shard_iterator(StreamName=name, ShardId=shard, ShardIteratorType="LATEST")[
        "ShardIterator"
    ]
    assert kinesis.get_records(ShardIterator=latest)["Records"] == []

    def data_from(**position: Any) -> list[bytes]:
        return [r["Data"] for r in read_all(kinesis, name, shard, **position)[0]]

    assert data_from(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=numbers[2]) == [
        b"2",
        b"3",
        b"4",
        b"5",
    ]
    assert data_from(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=numbers[2]) == [
        b"3",
        b"4",
        b"5",
    ]
    time.sleep(0.05)
    middle = time.time()
    time.sleep(0.05)
    kinesis.put_record(StreamName=name, Data=b"6", PartitionKey="p")
    assert data_from(ShardIteratorType="AT_TIMESTAMP", Timestamp=middle) == [b"6"]
    iterator = kinesis.get_shard_iterator(StreamName=name, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    page = kinesis.get_records(ShardIterator=iterator, Limit=3)
    assert [r["Data"] for r in page["Records"]] == [b"0", b"1", b"2"]
    assert page["MillisBehindLatest"] >= 0 and "NextShardIterator" in page
    rest = kinesis.get_records(ShardIterator=page["NextShardIterator"])
    assert [r["Data"] for r in rest["Records"]] == [b"3", b"4", b"5", b"6"]
    assert [r["Data"] for r in kinesis.get_records(ShardIterator=latest)["Records"]] == [b"6"]


def test_split_closes_the_parent_and_its_end_names_both_children(kinesis: Any) -> None:
    name = new_stream(kinesis, shards=1)
    (parent,) = shards_of(kinesis, name)
    before = kinesis.put_record(StreamName=name, Data=b"before", PartitionKey="a")
    middle = str(2**127)
    kinesis.split_shard(StreamName=name, ShardToSplit=parent["ShardId"], NewStartingHashKey=middle)
    shards = shards_of(kinesis, name)
    closed, left, right = shards
    assert "EndingSequenceNumber" in closed["SequenceNumberRange"]
    assert (left["ParentShardId"], right["ParentShardId"]) == (parent["ShardId"], parent["ShardId"])
    assert left["HashKeyRange"] == {"StartingHashKey": "0", "EndingHashKey": str(2**127 - 1)}
    assert right["HashKeyRange"] == {"StartingHashKey": middle, "EndingHashKey": str(2**128 - 1)}
    after = kinesis.put_record(StreamName=name, Data=b"after", PartitionKey="a")
    assert after["ShardId"] == owner(shards, "a") != parent["ShardId"]
    assert (
        int(after["SequenceNumber"])
        > int(closed["SequenceNumberRange"]["EndingSequenceNumber"])
        > int(before["SequenceNumber"])
    )
    records, end = read_all(kinesis, name, parent["ShardId"])
    assert [r["Data"] for r in records] == [b"before"]
    assert "NextShardIterator" not in end
    assert [(c["ShardId"], c["ParentShards"]) for c in end["ChildShards"]] == [
        (left["ShardId"], [parent["ShardId"]]),
        (right["ShardId"], [parent["ShardId"]]),
    ]


def test_merge_makes_a_child_with_two_parents(kinesis: Any) -> None:
    name = new_stream(kinesis, shards=2)
    first, second = shards_of(kinesis, name)
    kinesis.merge_shards(
        StreamName=name, ShardToMerge=second["ShardId"], AdjacentShardToMerge=first["ShardId"]
    )
    child = shards_of(kinesis, name, ShardFilter={"Type": "AT_LATEST"})
    assert len(child) == 1
    (merged,) = child
    assert (merged["ParentShardId"], merged["AdjacentParentShardId"]) == (second["ShardId"], first["ShardId"])
    assert covers_the_space(child)
    for parent in (first, second):
        _, end = read_all(kinesis, name, parent["ShardId"])
        assert end["ChildShards"] == [
            {
                "ShardId": merged["ShardId"],
                "ParentShards": [second["ShardId"], first["ShardId"]],
                "HashKeyRange": merged["HashKeyRange"],
            }
        ]


@pytest.mark.parametrize(("start", "target"), [(2, 4), (3, 5), (4, 2), (5, 3)])
def test_update_shard_count_reshards_by_splits_and_merges(kinesis: Any, start: int, target: int) -> None:
    name = new_stream(kinesis, shards=start)
    answer = kinesis.update_shard_count(
        StreamName=name, TargetShardCount=target, ScalingType="UNIFORM_SCALING"
    )
    assert (answer["CurrentShardCount"], answer["TargetShardCount"]) == (start, target)
    every = shards_of(kinesis, name)
    open_now = [s for s in every if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
    assert len(open_now) == target and covers_the_space(open_now)
    closed = {s["ShardId"] for s in every} - {s["ShardId"] for s in open_now}
    for shard in every:
        parents = [p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p]
        assert set(parents) <= closed
    two_parents = [s for s in every if "AdjacentParentShardId" in s]
    assert bool(two_parents) == (target < start)
    assert (
        kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["OpenShardCount"]
        == target
    )


def test_list_shards_filters_and_paging(kinesis: Any) -> None:
    name = new_stream(kinesis, shards=3)
    first = shards_of(kinesis, name)
    time.sleep(0.05)
    moment = time.time()
    time.sleep(0.05)
    kinesis.split_shard(
        StreamName=name,
        ShardToSplit=first[1]["ShardId"],
        NewStartingHashKey=str(int(first[1]["HashKeyRange"]["StartingHashKey"]) + 10),
    )
    ids = [s["ShardId"] for s in shards_of(kinesis, name)]
    assert ids == [f"shardId-00000000000{i}" for i in range(5)]
    assert [s["ShardId"] for s in shards_of(kinesis, name, ShardFilter={"Type": "AT_LATEST"})] == [
        ids[0],
        ids[2],
        ids[3],
        ids[4],
    ]
    after = shards_of(kinesis, name, ShardFilter={"Type": "AFTER_SHARD_ID", "ShardId": ids[1]})
    assert [s["ShardId"] for s in after] == ids[2:]
    assert [s["ShardId"] for s in shards_of(kinesis, name, ShardFilter={"Type": "AT_TRIM_HORIZON"})] == ids[
        :3
    ]
    at = shards_of(kinesis, name, ShardFilter={"Type": "AT_TIMESTAMP", "Timestamp": moment})
    assert [s["ShardId"] for s in at] == ids[:3]
    assert [
        s["ShardId"]
        for s in shards_of(kinesis, name, ShardFilter={"Type": "FROM_TIMESTAMP", "Timestamp": moment})
    ] == ids
    assert [s["ShardId"] for s in shards_of(kinesis, name, ExclusiveStartShardId=ids[2])] == ids[3:]
    page = kinesis.list_shards(StreamName=name, MaxResults=2)
    assert [s["ShardId"] for s in page["Shards"]] == ids[:2]
    assert [s["ShardId"] for s in shards_of(kinesis, name, MaxResults=2)] == ids
    filtered = kinesis.list_shards(StreamName=name, MaxResults=1, ShardFilter={"Type": "AT_LATEST"})
    second = kinesis.list_shards(NextToken=filtered["NextToken"], MaxResults=1)
    assert [s["ShardId"] for s in filtered["Shards"] + second["Shards"]] == [ids[0], ids[2]]
    legacy = kinesis.describe_stream(StreamName=name, Limit=2)["StreamDescription"]
    assert [s["ShardId"] for s in legacy["Shards"]] == ids[:2] and legacy["HasMoreShards"]


def _lineage(client: Any, name: str) -> list[tuple[Any, ...]]:
    client.create_stream(StreamName=name, ShardCount=3)
    first = client.list_shards(StreamName=name)["Shards"]
    split_at = str(
        (int(first[0]["HashKeyRange"]["StartingHashKey"]) + int(first[0]["HashKeyRange"]["EndingHashKey"]))
        // 2
    )
    client.split_shard(StreamName=name, ShardToSplit=first[0]["ShardId"], NewStartingHashKey=split_at)
    client.merge_shards(
        StreamName=name, ShardToMerge=first[1]["ShardId"], AdjacentShardToMerge=first[2]["ShardId"]
    )
    return [
        (
            s["ShardId"],
            s.get("ParentShardId"),
            s.get("AdjacentParentShardId"),
            s["HashKeyRange"]["StartingHashKey"],
            s["HashKeyRange"]["EndingHashKey"],
        )
        for s in client.list_shards(StreamName=name)["Shards"]
    ]


def test_reshard_lineage_matches_motos_kinesis(kinesis: Any) -> None:
    ours = _lineage(kinesis, f"lineage-{next(_names)}")
    with mock_aws():
        theirs = _lineage(boto3.client("kinesis", region_name="us-east-1"), "lineage")
    assert ours == theirs
    assert ours[-1][1:3] == ("shardId-000000000001", "shardId-000000000002")  # the merge's two parents

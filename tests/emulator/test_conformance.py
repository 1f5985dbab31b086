"""Conformance: every stream behaviour of the emulator, driven only through boto3 (+ the control API).

Records, views, lineage and reads here; limits, trimming, consistency, throttling, faults and bad
requests in test_conformance_limits.py.
"""

from __future__ import annotations

import itertools

import pytest
from botocore.exceptions import ClientError

from emulator.testing import RunningEmulator
from tests.emulator.conftest import (
    all_shards,
    error_code,
    make_table,
    read_shard,
    read_stream,
)


def test_k_partitions_give_k_open_shards_before_any_write(emulator: RunningEmulator) -> None:
    _, arn = make_table(emulator)
    shards = all_shards(emulator.client("dynamodbstreams"), arn)
    assert len(shards) == 2
    assert all("EndingSequenceNumber" not in s["SequenceNumberRange"] for s in shards)


def test_records_have_aws_format_and_events(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    ddb = emulator.client("dynamodb")
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "1"}})  # no change: no record
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "2"}})
    ddb.update_item(  # creates the item: exactly one INSERT
        TableName=table,
        Key={"pk": {"S": "b"}},
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"N": "5"}},
    )
    ddb.delete_item(TableName=table, Key={"pk": {"S": "a"}})
    ddb.delete_item(TableName=table, Key={"pk": {"S": "missing"}})  # nothing deleted: no record
    records = read_stream(emulator.client("dynamodbstreams"), arn)
    by_key = {}
    for r in records:
        by_key.setdefault(r["dynamodb"]["Keys"]["pk"]["S"], []).append(r)
    assert [r["eventName"] for r in by_key["a"]] == ["INSERT", "MODIFY", "REMOVE"]
    assert [r["eventName"] for r in by_key["b"]] == ["INSERT"]
    assert set(by_key) == {"a", "b"}
    modify = by_key["a"][1]
    assert modify["dynamodb"]["OldImage"] == {"pk": {"S": "a"}, "v": {"N": "1"}}
    assert modify["dynamodb"]["NewImage"] == {"pk": {"S": "a"}, "v": {"N": "2"}}
    assert by_key["b"][0]["dynamodb"]["NewImage"] == {"pk": {"S": "b"}, "v": {"N": "5"}}
    assert "NewImage" not in by_key["a"][2]["dynamodb"]
    for r in records:
        assert r["eventSource"] == "aws:dynamodb" and r["awsRegion"] == "us-east-1"
        assert r["dynamodb"]["SizeBytes"] > 0 and r["dynamodb"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
        assert r["dynamodb"]["ApproximateCreationDateTime"] is not None
        assert "userIdentity" not in r


@pytest.mark.parametrize("view", ["KEYS_ONLY", "NEW_IMAGE", "OLD_IMAGE"])
def test_stream_view_types_select_images(emulator: RunningEmulator, view: str) -> None:
    table, arn = make_table(emulator, view=view)
    ddb = emulator.client("dynamodb")
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "2"}})
    modify = read_stream(emulator.client("dynamodbstreams"), arn)[1]["dynamodb"]
    assert ("NewImage" in modify) == (view == "NEW_IMAGE")
    assert ("OldImage" in modify) == (view == "OLD_IMAGE")
    assert modify["Keys"] == {"pk": {"S": "a"}}


def test_batch_and_transact_writes_are_streamed(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator, sort_key=True)
    ddb = emulator.client("dynamodb")
    ddb.batch_write_item(
        RequestItems={
            table: [{"PutRequest": {"Item": {"pk": {"S": "x"}, "sk": {"N": str(i)}}}} for i in range(3)]
        }
    )
    ddb.transact_write_items(
        TransactItems=[
            {"Delete": {"TableName": table, "Key": {"pk": {"S": "x"}, "sk": {"N": "0"}}}},
            {"Put": {"TableName": table, "Item": {"pk": {"S": "y"}, "sk": {"N": "1"}}}},
        ]
    )
    names = sorted(r["eventName"] for r in read_stream(emulator.client("dynamodbstreams"), arn))
    assert names == ["INSERT"] * 4 + ["REMOVE"]


def test_ttl_delete_carries_user_identity(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    emulator.client("dynamodb").put_item(TableName=table, Item={"pk": {"S": "old"}})
    assert emulator.control.ttl_delete(table, {"pk": {"S": "old"}})
    remove = read_stream(emulator.client("dynamodbstreams"), arn)[-1]
    assert remove["eventName"] == "REMOVE"
    assert remove["userIdentity"] == {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}


def test_rollover_closes_shards_children_carry_parent_and_higher_sequence(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    ddb, streams = emulator.client("dynamodb"), emulator.client("dynamodbstreams")
    for i in range(20):
        ddb.put_item(TableName=table, Item={"pk": {"S": f"k{i}"}})
    created = emulator.control.rollover(table)
    for i in range(20):
        ddb.put_item(TableName=table, Item={"pk": {"S": f"k{i}"}, "v": {"N": "1"}})
    shards = {s["ShardId"]: s for s in all_shards(streams, arn)}
    assert len(shards) == 4 and len(created) == 2
    for child_id in created:
        child = shards[child_id]
        parent = shards[child["ParentShardId"]]
        ending = int(parent["SequenceNumberRange"]["EndingSequenceNumber"])
        assert int(child["SequenceNumberRange"]["StartingSequenceNumber"]) > ending
        parent_seqs = [
            int(r["dynamodb"]["SequenceNumber"]) for r in read_shard(streams, arn, parent["ShardId"])
        ]
        child_seqs = [int(r["dynamodb"]["SequenceNumber"]) for r in read_shard(streams, arn, child_id)]
        assert parent_seqs == sorted(parent_seqs) and child_seqs == sorted(child_seqs)
        assert max(parent_seqs) <= ending < min(child_seqs)
        gaps = [b - a for a, b in itertools.pairwise(parent_seqs)]
        assert any(gap > 1 for gap in gaps)  # not contiguous


def test_split_gives_two_children_of_one_parent(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    left, right = emulator.control.split(table, partition=0)
    shards = {s["ShardId"]: s for s in all_shards(emulator.client("dynamodbstreams"), arn)}
    assert shards[left]["ParentShardId"] == shards[right]["ParentShardId"]
    assert "EndingSequenceNumber" in shards[shards[left]["ParentShardId"]]["SequenceNumberRange"]
    assert sum(1 for s in shards.values() if "EndingSequenceNumber" not in s["SequenceNumberRange"]) == 3


def test_closed_shard_read_to_end_has_no_next_iterator_open_shard_returns_empty(
    emulator: RunningEmulator,
) -> None:
    table, arn = make_table(emulator)
    streams = emulator.client("dynamodbstreams")
    open_shard = all_shards(streams, arn)[0]["ShardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=open_shard, ShardIteratorType="LATEST")[
        "ShardIterator"
    ]
    empty = streams.get_records(ShardIterator=it)
    assert empty["Records"] == [] and empty["NextShardIterator"]
    emulator.control.rollover(table)
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=open_shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    ended = streams.get_records(ShardIterator=it)
    assert "NextShardIterator" not in ended


def test_get_records_limit_and_bounds(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    ddb, streams = emulator.client("dynamodb"), emulator.client("dynamodbstreams")
    emulator.control.split(table, partition=0)  # more shards, same behaviour
    for i in range(30):
        ddb.put_item(TableName=table, Item={"pk": {"S": "same"}, "v": {"N": str(i)}})
    shard = next(s for s in emulator.control.shards(table) if s["records"])["shardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    page = streams.get_records(ShardIterator=it, Limit=7)
    assert len(page["Records"]) == 7
    rest = streams.get_records(ShardIterator=page["NextShardIterator"], Limit=1000)
    assert len(rest["Records"]) == 23
    with pytest.raises(ClientError) as exc:
        streams.get_records(ShardIterator=it, Limit=1001)
    assert error_code(exc) == "ValidationException"


def test_get_records_caps_a_response_at_one_megabyte(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    ddb, streams = emulator.client("dynamodb"), emulator.client("dynamodbstreams")
    big = "x" * 300_000
    for i in range(5):
        ddb.put_item(TableName=table, Item={"pk": {"S": "big"}, "v": {"S": big + str(i)}})
    shard = next(s for s in emulator.control.shards(table) if s["records"])["shardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    first = streams.get_records(ShardIterator=it)
    assert 1 <= len(first["Records"]) < 5


def test_at_and_after_sequence_number(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    ddb, streams = emulator.client("dynamodb"), emulator.client("dynamodbstreams")
    for i in range(3):
        ddb.put_item(TableName=table, Item={"pk": {"S": "s"}, "v": {"N": str(i)}})
    shard = next(s for s in emulator.control.shards(table) if s["records"])["shardId"]
    seqs = [r["dynamodb"]["SequenceNumber"] for r in read_shard(streams, arn, shard)]
    for kind, expected in (("AT_SEQUENCE_NUMBER", seqs[1:]), ("AFTER_SEQUENCE_NUMBER", seqs[2:])):
        it = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard, ShardIteratorType=kind, SequenceNumber=seqs[1]
        )
        got = streams.get_records(ShardIterator=it["ShardIterator"])["Records"]
        assert [r["dynamodb"]["SequenceNumber"] for r in got] == expected


def test_describe_stream_paging(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    for _ in range(3):
        emulator.control.rollover(table)
    streams = emulator.client("dynamodbstreams")
    first = streams.describe_stream(StreamArn=arn, Limit=3)["StreamDescription"]
    assert len(first["Shards"]) == 3 and first["LastEvaluatedShardId"] == first["Shards"][-1]["ShardId"]
    paged = all_shards(streams, arn, Limit=3)
    assert len(paged) == 8 and len({s["ShardId"] for s in paged}) == 8
    with pytest.raises(ClientError) as exc:
        streams.describe_stream(StreamArn=arn, Limit=101)
    assert error_code(exc) == "ValidationException"


def test_shard_filter_child_shards(emulator: RunningEmulator) -> None:
    table, arn = make_table(emulator)
    parent = all_shards(emulator.client("dynamodbstreams"), arn)[0]["ShardId"]
    children = emulator.control.split(table, partition=0)
    listed = emulator.client("dynamodbstreams").describe_stream(
        StreamArn=arn, ShardFilter={"Type": "CHILD_SHARDS", "ShardId": parent}
    )["StreamDescription"]["Shards"]
    assert sorted(s["ShardId"] for s in listed) == sorted(children)

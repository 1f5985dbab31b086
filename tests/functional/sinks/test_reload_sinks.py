"""The built-in sinks take a reload in (worker.on_trimmed: reload): the change log lands it apart,
the replica ends at the table's state whatever order the reload and the stream's changes come in."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from consumer.processing import Batch
from consumer.processing.gap import GapEvent, reloaded_record
from consumer.records import ShardInfo, StreamRecord
from consumer.sinks.changelog import ChangelogSink, ChangelogStore
from consumer.sinks.dynamodb_replica import DynamoDBReplicaSink

SHARD = ShardInfo("shardId-0002")
T = 1_700_000_500.0  # the reload's start
GAP = GapEvent(SHARD, "gap", "000000000000000000100", "000000000000000000900", None, None, "r1", T)


def change(seq: int, key: str, event: str, created: float, value: int = 0) -> StreamRecord:
    body: dict[str, Any] = {
        "Keys": {"pk": {"S": key}},
        "SequenceNumber": str(seq).zfill(21),
        "SizeBytes": 30,
        "ApproximateCreationDateTime": created,
    }
    if event != "REMOVE":
        body["NewImage"] = {"pk": {"S": key}, "v": {"N": str(value)}}
    return StreamRecord({"eventID": f"e{seq}", "eventName": event, "dynamodb": body}, SHARD.shard_id)


def reloaded(number: int, key: str, value: int) -> StreamRecord:
    item = {"pk": {"S": key}, "v": {"N": str(value)}}
    return reloaded_record(item, key_names=("pk",), number=number, gap=GAP)


def test_the_changelog_lands_a_reload_apart_with_its_markers(tmp_path: Path) -> None:
    sink = ChangelogSink(ChangelogStore(str(tmp_path)), "orders")
    sink(Batch(SHARD, (), gap=GAP))
    page = (reloaded(1, "a", 1), reloaded(2, "b", 2))
    sink(Batch(SHARD, page, reload=GAP))
    sink(Batch(SHARD, page, reload=GAP))  # delivered again: the same object
    sink(Batch(SHARD, (), gap=GAP.finished(2)))
    folder = tmp_path / "_reloads" / "r1"
    assert sorted(p.name for p in folder.iterdir()) == [
        f"{1:040d}-{2:040d}.jsonl.gz",
        "end.json",
        "start.json",
    ]
    end = json.loads((folder / "end.json").read_text())
    assert end["phase"] == "reloaded" and end["recordsReloaded"] == 2 and end["reloadStartedAt"] == T
    assert not (tmp_path / SHARD.shard_id).exists()  # no change of the shard was written


@pytest.fixture
def replica(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, DynamoDBReplicaSink]]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="replica",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client, DynamoDBReplicaSink("replica", client)


def values(client: Any) -> dict[str, int]:
    items = client.scan(TableName="replica")["Items"]
    return {i["pk"]["S"]: int(i["v"]["N"]) for i in items}


def test_the_replica_ends_at_the_table_whatever_the_order(replica: tuple[Any, DynamoDBReplicaSink]) -> None:
    client, sink = replica
    # Before the gap: a, b, c, d, e as the replica knew them.
    sink(Batch(SHARD, tuple(change(10 + i, k, "INSERT", T - 100, 0) for i, k in enumerate("abcde"))))
    # Another shard, ahead of the reload: d changed after the reload started.
    sink(Batch(SHARD, (change(500, "d", "MODIFY", T + 5, 9),)))
    # The table as the reload read it: a updated and e created in the gap, b deleted in the gap
    # (absent), c unchanged, d as it was before its newer change.
    sink(Batch(SHARD, (), gap=GAP))
    sink(
        Batch(
            SHARD,
            (reloaded(1, "a", 1), reloaded(2, "c", 0), reloaded(3, "d", 3), reloaded(4, "f", 4)),
            reload=GAP,
        )
    )
    # A shard that lags delivers a's older change after the reload: refused (the reload is newer).
    assert not sink.apply(change(20, "a", "MODIFY", T - 50, 7))
    sink(Batch(SHARD, (), gap=GAP.finished(4)))
    # After the reload, the shard's own later changes apply on top.
    sink(Batch(SHARD, (change(900, "c", "MODIFY", T + 10, 5),)))
    assert values(client) == {"a": 1, "c": 5, "d": 9, "f": 4}  # b and e: deleted in the gap, swept


def test_a_reload_of_an_item_deleted_after_the_scan_read_it_is_refused_by_the_tombstone(
    replica: tuple[Any, DynamoDBReplicaSink],
) -> None:
    client, _ = replica
    client.create_table(
        TableName="tombstones",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    sink = DynamoDBReplicaSink("replica", client, tombstone_table="tombstones")
    sink(Batch(SHARD, (change(10, "a", "INSERT", T - 100, 0), change(600, "a", "REMOVE", T + 3))))
    assert not sink.reload(reloaded(1, "a", 0))  # the REMOVE came after the reload's start
    assert values(client) == {}

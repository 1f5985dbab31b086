"""The built-in sinks and the S3/SQS dead letters against moto (in-process AWS, no network)."""

from __future__ import annotations

import base64
import gzip
import io
import random
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import orjson
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from consumer.processing import Batch
from consumer.processing.dead_letter import FailedRecords, S3DeadLetter, SqsDeadLetter
from consumer.records import ShardInfo, StreamRecord
from consumer.sinks.changelog import ChangelogSink, ChangelogStore
from consumer.sinks.dynamodb_replica import DEFAULT_SEQUENCE_ATTRIBUTE, DynamoDBReplicaSink

SHARD = ShardInfo("shardId-0002", ("shardId-0001",))
REGION = "us-east-1"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


def change(seq: int, key: str, event: str, value: int | None = None) -> StreamRecord:
    keys = {"pk": {"S": key}}
    body: dict[str, Any] = {"Keys": keys, "SequenceNumber": str(seq).zfill(21), "SizeBytes": 30}
    body["ApproximateCreationDateTime"] = 1_700_000_000.0 + seq
    if event != "REMOVE":
        body["NewImage"] = {
            **keys,
            "value": {"N": str(value)},
            "price": {"N": "1.50"},
            "blob": {"B": base64.b64encode(bytes([seq % 256, 0])).decode()},
            "tags": {"SS": ["a", "b"]},
            "nested": {"M": {"raw": {"BS": [base64.b64encode(b"x").decode()]}}},
        }
    return StreamRecord({"eventID": f"e{seq}", "eventName": event, "dynamodb": body}, SHARD.shard_id)


def history(count: int, seed: int = 5) -> list[StreamRecord]:
    rng, alive, out = random.Random(seed), set[str](), []
    for seq in range(100, 100 + count):
        key = f"k{rng.randrange(6)}"
        if key in alive and rng.random() < 0.3:
            alive.discard(key)
            out.append(change(seq, key, "REMOVE"))
        else:
            out.append(change(seq, key, "MODIFY" if key in alive else "INSERT", seq))
            alive.add(key)
    return out


def final_state(changes: list[StreamRecord]) -> dict[str, int]:
    state: dict[str, int] = {}
    for record in changes:
        key = record.keys["pk"]
        if record.event_name == "REMOVE":
            state.pop(key, None)
        else:
            assert record.new_image is not None
            state[key] = int(record.new_image["value"])
    return state


# ------------------------------------------------------------------------------------ changelog


def read_local(directory: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        str(p.relative_to(directory)): [
            orjson.loads(line) for line in gzip.decompress(p.read_bytes()).splitlines()
        ]
        for p in sorted(directory.rglob("*.jsonl.gz"))
    }


def test_changelog_lands_one_object_per_batch_and_a_replay_overwrites_it(tmp_path: Path) -> None:
    sink = ChangelogSink(ChangelogStore(str(tmp_path)), "orders", now=lambda: 1.0)
    changes = history(10)
    sink(Batch(SHARD, tuple(changes[:6])))
    sink(Batch(SHARD, tuple(changes[6:])))
    sink(Batch(SHARD, tuple(changes[:6])))  # replayed after a crash
    objects = read_local(tmp_path)
    names = [f"{a.zfill(40)}-{b.zfill(40)}.jsonl.gz" for a, b in (("100", "105"), ("106", "109"))]
    assert sorted(objects) == [f"shardId-0002/{name}" for name in names]
    lines = [line for batch in objects.values() for line in batch]
    assert [int(line["sequenceNumber"]) for line in lines] == list(range(100, 110))
    one = lines[0]
    assert one["table"] == "orders" and one["parentShardIds"] == ["shardId-0001"]
    assert one["newImage"]["price"] == {"N": "1.50"}  # attribute-value JSON keeps precision
    assert not list(tmp_path.rglob(".tmp-*"))


def test_a_replay_with_other_batch_boundaries_lands_each_change_once(tmp_path: Path) -> None:
    changes = history(12)
    ChangelogSink(ChangelogStore(str(tmp_path)), "orders")(Batch(SHARD, tuple(changes[:5])))
    # A new owner (fresh sink: nothing cached) re-reads from the old checkpoint with a bigger batch.
    ChangelogSink(ChangelogStore(str(tmp_path)), "orders")(Batch(SHARD, tuple(changes[2:12])))
    lines = [line for batch in read_local(tmp_path).values() for line in batch]
    assert sorted(int(line["sequenceNumber"]) for line in lines) == list(range(100, 112))


def test_changelog_to_s3_and_as_parquet(aws: None) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="lake")
    changes = tuple(history(4))
    ChangelogSink(ChangelogStore("s3://lake/changes", s3_client=s3), "orders")(Batch(SHARD, changes))
    ChangelogSink(ChangelogStore("s3://lake/changes", s3_client=s3), "orders")(
        Batch(SHARD, changes)
    )  # replay
    ChangelogSink(ChangelogStore("s3://lake/columns", s3_client=s3), "orders", fmt="parquet")(
        Batch(SHARD, changes)
    )
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="lake")["Contents"])
    span = f"{'100'.zfill(40)}-{'103'.zfill(40)}"
    assert keys == [f"changes/shardId-0002/{span}.jsonl.gz", f"columns/shardId-0002/{span}.parquet"]
    body = s3.get_object(Bucket="lake", Key=keys[0])["Body"].read()
    assert len(gzip.decompress(body).splitlines()) == 4
    table = pq.read_table(io.BytesIO(s3.get_object(Bucket="lake", Key=keys[1])["Body"].read()))
    assert table.column("sequenceNumber").to_pylist() == [str(s).zfill(21) for s in range(100, 104)]


# ------------------------------------------------------------------------------------- replica


def replica_state(client: Any, table: str) -> dict[str, dict[str, Any]]:
    items = client.scan(TableName=table)["Items"]
    return {item["pk"]["S"]: item for item in items}


def create_table(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def late_retries(changes: list[StreamRecord]) -> list[StreamRecord]:
    """Every change that some later change of the same item supersedes."""
    last = {}
    for record in changes:
        last[record.keys["pk"]] = int(record.sequence_number)
    return [r for r in changes if int(r.sequence_number) < last[r.keys["pk"]]]


def values(client: Any, table: str) -> dict[str, int]:
    return {k: int(v["value"]["N"]) for k, v in replica_state(client, table).items()}


def test_replica_equals_the_source_after_an_in_order_replay(aws: None) -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    create_table(client, "replica")
    sink = DynamoDBReplicaSink("replica", client)
    changes = history(40)
    sink(Batch(SHARD, tuple(changes[:25])))
    sink(Batch(SHARD, tuple(changes[10:25])))  # replayed from an older checkpoint after a crash
    sink(Batch(SHARD, tuple(changes[25:])))
    state = replica_state(client, "replica")
    assert values(client, "replica") == final_state(changes)
    some = next(iter(state.values()))
    assert (
        some["blob"]["B"]
        and some["tags"]["SS"] == ["a", "b"]
        and Decimal(some["price"]["N"]) == Decimal("1.5")
    )
    assert some[DEFAULT_SEQUENCE_ATTRIBUTE]["S"].isdigit()
    newest_put = next(r for r in reversed(changes) if r.event_name != "REMOVE")
    assert sink.apply(newest_put) is False  # already there: refused, nothing written


def test_with_tombstones_no_late_retry_rolls_an_item_back_or_resurrects_it(aws: None) -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    create_table(client, "replica")
    create_table(client, "replica-tombstones")
    sink = DynamoDBReplicaSink("replica", client, tombstone_table="replica-tombstones", now=lambda: 1000.0)
    changes = history(40)
    sink(Batch(SHARD, tuple(changes)))
    stale = late_retries(changes)
    assert any(r.event_name == "REMOVE" for r in changes) and stale
    assert not any(sink.apply(r) for r in stale)
    assert values(client, "replica") == final_state(changes)
    tombstones = replica_state(client, "replica-tombstones")
    assert tombstones and all(t["expiresAt"]["N"] == str(1000 + 2 * 24 * 3600) for t in tombstones.values())


# ---------------------------------------------------------------------------------- dead letters


def test_dead_letters_to_s3_and_sqs_carry_the_records_and_the_error(aws: None) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    s3.create_bucket(Bucket="dlq")
    queue = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    failed = FailedRecords(SHARD, tuple(history(12)), ValueError("mapping rejected"), 3)
    S3DeadLetter("s3://dlq/failed", s3).send(failed)
    SqsDeadLetter(queue, sqs).send(failed)
    (obj,) = s3.list_objects_v2(Bucket="dlq")["Contents"]
    document = orjson.loads(s3.get_object(Bucket="dlq", Key=obj["Key"])["Body"].read())
    assert obj["Key"].startswith("failed/shardId-0002/")
    assert document["error"] == {"type": "ValueError", "message": "mapping rejected"}
    assert len(document["records"]) == 12 and document["attempts"] == 3
    bodies = []
    while len(bodies) < 12:
        answer = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)
        bodies += [orjson.loads(m["Body"]) for m in answer.get("Messages", [])]
    assert sorted(int(b["sequenceNumber"]) for b in bodies) == list(range(100, 112))
    assert all(b["error"]["message"] == "mapping rejected" for b in bodies)

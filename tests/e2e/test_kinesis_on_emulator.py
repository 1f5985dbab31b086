"""``consumer run`` on the emulator's Kinesis: KPL-aggregated records, a kill inside an aggregate, a Java
KCL leases table taken up, and one fleet serving a table's stream and a Kinesis stream together.

The records are built from the KPL's published format (tests/kpl_format.py: magic F3 89 9A C2, the
AggregatedRecord protobuf, the MD5 trailer). An aggregate's user records belong to one *group*: the
Kinesis record's partition key is the group's and every user record's explicit hash key is the
group key's MD5, as the KPL aggregates only user records bound for one shard -- so a user partition
key always maps to one shard at a time, and its order is the stream's, across splits too.

What is checked is what the handler recorded (tests/e2e/kinesis_processors.py), per process: every
user record delivered, none twice, each partition key's records in the order they were put.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from emulator.testing import RunningEmulator, running_emulator
from ground.positions import ordinal, position_text
from tests.e2e.fast_settings import FAST_WORKER_YAML
from tests.e2e.kinesis_processors import read_deliveries
from tests.kpl_format import User, aggregate
from tests.support import wait_for
from tools.demo.fleet import LocalFleet

pytestmark = [pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]
ENVIRON = {"PYTHONPATH": str(REPO), "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
USERS_PER_AGGREGATE = 7
HANDLER = "tests.e2e.kinesis_processors:RecordingHandler"

Put = tuple[str, str]  # (user partition key, data) in the order put


def group_hash(group: str) -> str:
    return str(int.from_bytes(hashlib.md5(group.encode()).digest(), "big"))


def put_round(client: Any, stream: str, groups: int, round_: int) -> list[Put]:
    """One aggregate per group, then one plain record per group; what was put, in order."""
    put: list[Put] = []
    for g in range(groups):
        group = f"group{g}"
        users = [
            User(f"g{g}k{j}", f"{round_}:{g}:{j}".encode(), group_hash(group))
            for j in range(USERS_PER_AGGREGATE)
        ]
        client.put_record(StreamName=stream, Data=aggregate(users), PartitionKey=group)
        put.extend((u.partition_key, u.data.decode()) for u in users)
        client.put_record(StreamName=stream, Data=f"{round_}:{g}:plain".encode(), PartitionKey=group)
        put.append((group, f"{round_}:{g}:plain"))
    return put


def kinesis_config(directory: Path, endpoint: str, app: str, source: str, out: Path, extra: str = "") -> None:
    (directory / "kinesis.yaml").write_text(
        f"""
application_name: {app}
region: us-east-1
endpoint_url: {endpoint}
table: {{name: unused, partition_key: {{name: pk, type: S}}}}
{FAST_WORKER_YAML}
metrics: {{destination: none}}
{source}
processing:
  processor: {HANDLER}
  options: {{out_dir: {out}{extra}}}
  batching: {{batch_size: 3}}
  dead_letter: {{type: none}}
"""
    )


def deliveries_of(out: Path, stream: str = "kinesis") -> dict[int, list[dict[str, Any]]]:
    return {pid: [r for r in rows if r["stream"] == stream] for pid, rows in read_deliveries(out).items()}


def delivered_count(out: Path, stream: str = "kinesis") -> int:
    return sum(len(rows) for rows in deliveries_of(out, stream).values())


def assert_exactly_once_in_order(rows: list[dict[str, Any]], put: list[Put]) -> None:
    """Every put delivered once; each partition key's records in put order (``rows`` in delivery
    order: one process's, or several merged by the time they were recorded)."""
    seen = Counter((r["key"], r["data"]) for r in rows)
    assert seen == Counter(put), (
        f"missing {sorted((Counter(put) - seen).elements())[:5]}, twice {[k for k, n in seen.items() if n > 1][:5]}"
    )
    order: dict[str, list[str]] = defaultdict(list)
    for key, data in put:
        order[key].append(data)
    got: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        got[row["key"]].append(row["data"])
    assert got == order


def position(row: dict[str, Any]) -> int:
    return ordinal(position_text(row["seq"], row["sub"]))


def leases(emu: RunningEmulator, table: str) -> dict[str, dict[str, Any]]:
    items = emu.client("dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]
    return {item["leaseKey"]["S"]: item for item in items}


# --------------------------------------------------------------------- a. a kill inside an aggregate


def test_a_worker_killed_inside_an_aggregate_resumes_inside_it(tmp_path: Path) -> None:
    config, out, marker = tmp_path / "config", tmp_path / "out", tmp_path / "died"
    config.mkdir()
    with running_emulator(partitions=1, rollover_seconds=3600) as emu:
        client = emu.client("kinesis")
        client.create_stream(StreamName="clicks", ShardCount=1)
        put = [p for r in range(3) for p in put_round(client, "clicks", 3, r)]
        # The third call of the first process kills it: two spans of three user records handled and
        # checkpointed, the second one ending inside the first aggregate.
        kinesis_config(
            config, emu.endpoint, "kw-kill", "source: {kind: kinesis, stream_name: clicks}", out,
            f", die_at_call: 3, die_marker: {marker}",
        )  # fmt: skip
        with LocalFleet("kinesis", config, tmp_path / "logs", ENVIRON) as fleet:
            first = fleet.start_worker()
            wait_for(lambda: not first.alive, 60, "the first worker to die at its third call")
            (lease,) = leases(emu, "kw-kill").values()
            checkpoint = position_text(
                lease["checkpoint"]["S"], int(lease["checkpointSubSequenceNumber"]["N"])
            )
            before = deliveries_of(out)
            (first_rows,) = before.values()
            assert (
                len(first_rows) == 6
                and 0 < int(lease["checkpointSubSequenceNumber"]["N"]) < USERS_PER_AGGREGATE - 1
            )
            assert position(first_rows[-1]) == ordinal(checkpoint)  # inside the aggregate, as KCL writes it
            fleet.start_worker()
            wait_for(lambda: delivered_count(out) >= len(put), 60, f"{len(put)} user records")
            time.sleep(1)  # anything delivered twice would show now
        after = {pid: rows for pid, rows in deliveries_of(out).items() if pid not in before}
        (second_rows,) = after.values()
        assert all(position(r) > ordinal(checkpoint) for r in second_rows)  # nothing at or below it again
        assert_exactly_once_in_order(first_rows + second_rows, put)  # nothing lost, each key in order


# ------------------------------------------------------------ b. a Java KCL leases table taken up


def kcl_item(key: str, checkpoint: str, sub: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A lease as the Java KCL writes it (released: no owner)."""
    return {
        "leaseKey": {"S": key},
        "leaseCounter": {"N": "7"},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": str(sub)},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        **(extra or {}),
    }


@pytest.mark.parametrize("multi_stream", [False, True], ids=["shard-id-keys", "multi-stream-keys"])
def test_a_java_kcl_leases_table_is_taken_up_where_it_stopped(tmp_path: Path, multi_stream: bool) -> None:
    config, out = tmp_path / "config", tmp_path / "out"
    config.mkdir()
    app = "kw-kcl-multi" if multi_stream else "kw-kcl"
    with running_emulator(partitions=1, rollover_seconds=3600) as emu:
        client = emu.client("kinesis")
        client.create_stream(StreamName="orders-events", ShardCount=2)
        put = [p for r in range(2) for p in put_round(client, "orders-events", 4, r)]
        summary = client.describe_stream_summary(StreamName="orders-events")["StreamDescriptionSummary"]
        epoch = int(summary["StreamCreationTimestamp"].timestamp())
        identifier = f"123456789012:orders-events:{epoch}"
        shards = [s["ShardId"] for s in client.list_shards(StreamName="orders-events")["Shards"]]
        # What the KCL application processed: on one shard up to a plain record, on the other up to
        # the fourth user record of an aggregate.
        read: dict[str, list[dict[str, Any]]] = {}
        for shard in shards:
            iterator = client.get_shard_iterator(
                StreamName="orders-events", ShardId=shard, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            read[shard] = client.get_records(ShardIterator=iterator)["Records"]
        plain_shard = next(s for s in shards if len(read[s]) >= 4)
        aggregate_shard = next(s for s in shards if s != plain_shard and read[s]) if len(shards) > 1 else None
        assert aggregate_shard is not None, "both shards need records: change the groups"
        plain_at = read[plain_shard][1]["SequenceNumber"]  # a group's plain record (aggregate, plain, ...)
        aggregate_at = read[aggregate_shard][2]["SequenceNumber"]  # an aggregate
        ddb = emu.client("dynamodb")
        ddb.create_table(
            TableName=app,
            KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for shard, at, sub in ((plain_shard, plain_at, 0), (aggregate_shard, aggregate_at, 3)):
            key = f"{identifier}:{shard}" if multi_stream else shard
            extra = {"streamName": {"S": identifier}, "shardId": {"S": shard}} if multi_stream else None
            ddb.put_item(TableName=app, Item=kcl_item(key, at, sub, extra))
        if multi_stream:
            source = (
                "streams:\n  - source: {kind: kinesis, stream_name: orders-events}\n"
                f"    processing: {{processor: '{HANDLER}', options: {{out_dir: {out}}}}}"
            )
        else:
            source = "source: {kind: kinesis, stream_name: orders-events}"
        kinesis_config(config, emu.endpoint, app, source, out)
        done = {
            (plain_shard, ordinal(plain_at)),
            (aggregate_shard, ordinal(position_text(aggregate_at, 3))),
        }
        expected = [
            (r["key"], r["data"])
            for shard in shards
            for r in all_user_records(client, "orders-events", shard)
            if all(not (s == shard and ordinal(position_text(r["seq"], r["sub"])) <= at) for s, at in done)
        ]
        assert 0 < len(expected) < len(put)
        with LocalFleet("kinesis", config, tmp_path / "logs", ENVIRON) as fleet:
            fleet.start_worker()
            wait_for(lambda: delivered_count(out) >= len(expected), 60, f"{len(expected)} user records")
            time.sleep(1)
        rows = [r for rows in deliveries_of(out).values() for r in rows]
        for shard, at in done:  # nothing at or below a checkpoint delivered again
            assert all(position(r) > at for r in rows if r["shard"] == shard)
        assert Counter((r["key"], r["data"]) for r in rows) == Counter(expected)
        keys = {f"{identifier}:{shard}" if multi_stream else shard for shard in shards}
        assert set(leases(emu, app)) == keys  # the KCL application's leases taken up, no others made


def all_user_records(client: Any, stream: str, shard: str) -> list[dict[str, Any]]:
    """A shard's user records as (seq, sub, key, data) rows, de-aggregated by the product's reader."""
    from consumer.records.kinesis_record import user_records

    iterator = client.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    rows: list[dict[str, Any]] = []
    while iterator:
        answer = client.get_records(ShardIterator=iterator)
        for record in answer["Records"]:
            rows.extend(
                {
                    "seq": u.sequence_number,
                    "sub": u.sub_sequence_number,
                    "key": u.partition_key,
                    "data": u.data.decode(),
                }
                for u in user_records(shard, record)
            )
        if not answer["Records"]:
            break
        iterator = answer.get("NextShardIterator")
    return rows


# --------------------------------------------------- c. a table's stream and a Kinesis stream at once


def test_one_fleet_serves_a_tables_stream_and_a_kinesis_stream_across_a_split(tmp_path: Path) -> None:
    config, out = tmp_path / "config", tmp_path / "out"
    config.mkdir()
    app = "kw-both"
    with running_emulator(partitions=2, rollover_seconds=3600) as emu:
        ddb, client = emu.client("dynamodb"), emu.client("kinesis")
        ddb.create_table(
            TableName="orders",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
        client.create_stream(StreamName="clicks", ShardCount=2)
        (config / "both.yaml").write_text(
            f"""
application_name: {app}
region: us-east-1
endpoint_url: {emu.endpoint}
table: {{name: orders, partition_key: {{name: pk, type: S}}}}
{FAST_WORKER_YAML}
metrics: {{destination: none}}
processing:
  processor: {HANDLER}
  batching: {{batch_size: 5}}
  dead_letter: {{type: none}}
streams:
  - table: {{name: orders}}
    processing: {{options: {{out_dir: {out}}}, dead_letter: {{uri: var/dl-orders}}}}
  - source: {{kind: kinesis, stream_name: clicks, shard_count: 2}}
    processing: {{options: {{out_dir: {out}}}, dead_letter: {{uri: var/dl-clicks}}}}
"""
        )
        table_puts: list[Put] = []
        kinesis_puts: list[Put] = []

        def write(rounds: range) -> None:
            for r in rounds:
                kinesis_puts.extend(put_round(client, "clicks", 3, r))
                for k in range(4):
                    ddb.put_item(TableName="orders", Item={"pk": {"S": f"item{k}"}, "n": {"N": str(r)}})
                    table_puts.append((f"item{k}", f'{{"n": "{r}", "pk": "item{k}"}}'))  # N as text
                time.sleep(0.2)

        with LocalFleet("both", config, tmp_path / "logs", ENVIRON) as fleet:
            fleet.start_worker()
            fleet.start_worker()
            writer = threading.Thread(target=write, args=(range(0, 8),))
            writer.start()
            writer.join()
            parent = client.list_shards(StreamName="clicks")["Shards"][0]
            low, high = (int(parent["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
            client.split_shard(
                StreamName="clicks", ShardToSplit=parent["ShardId"], NewStartingHashKey=str((low + high) // 2)
            )
            write(range(8, 14))
            wait_for(
                lambda: (
                    delivered_count(out) >= len(kinesis_puts)
                    and delivered_count(out, "dynamodb") >= len(table_puts)
                ),
                60,
                "every change and every user record",
            )
            time.sleep(1)
            shards = client.list_shards(StreamName="clicks")["Shards"]
        assert len(shards) == 4  # the split happened under the fleet: a parent and two children
        for stream, put in (("kinesis", kinesis_puts), ("dynamodb", table_puts)):
            rows = [
                (row["at"], pid, i, row)
                for pid, rs in deliveries_of(out, stream).items()
                for i, row in enumerate(rs)
            ]
            ordered = [row for _, _, _, row in sorted(rows, key=lambda t: (t[0], t[1], t[2]))]
            assert_exactly_once_in_order(ordered, put)
        children = {s["ShardId"] for s in shards if s.get("ParentShardId") == parent["ShardId"]}
        assert {
            r["shard"] for rs in deliveries_of(out).values() for r in rs
        } & children  # read after the split

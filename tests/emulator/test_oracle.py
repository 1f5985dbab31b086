"""Oracle: random puts, updates and deletes on many keys while rollovers, splits and faults happen;
read back parents-first with plain boto3; every change exactly once, in per-item order."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from emulator.testing import RunningEmulator, running_emulator
from tests.emulator.conftest import make_table

RETRYABLE = {"LimitExceededException", "InternalServerError", "ExpiredIteratorException"}


def _writer(
    emu: RunningEmulator, table: str, keys: list[str], writes: int, seed: int, out: dict[str, list[Any]]
) -> None:
    """Writes to its own keys and records the change each write must produce (None: no record)."""
    rng = random.Random(seed)
    ddb = emu.client("dynamodb")
    state: dict[str, dict[str, Any] | None] = dict.fromkeys(keys)
    for n in range(writes):
        key = rng.choice(keys)
        old = state[key]
        roll = rng.random()
        if roll < 0.45:
            new = {"pk": {"S": key}, "v": {"N": str(rng.randint(0, 3))}}
            ddb.put_item(TableName=table, Item=new)
        elif roll < 0.8:
            value = str(rng.randint(0, 3))
            ddb.update_item(
                TableName=table,
                Key={"pk": {"S": key}},
                UpdateExpression="SET v = :v",
                ExpressionAttributeValues={":v": {"N": value}},
            )
            new = {"pk": {"S": key}, "v": {"N": value}}
        else:
            ddb.delete_item(TableName=table, Key={"pk": {"S": key}})
            new = None
        state[key] = new
        if old != new:
            name = "INSERT" if old is None else "REMOVE" if new is None else "MODIFY"
            out.setdefault(key, []).append((name, new, old, n))


def _call(fn: Any, **kwargs: Any) -> Any:
    while True:
        try:
            return fn(**kwargs)
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in RETRYABLE:
                raise
            time.sleep(0.02)


def _read_parents_first(emu: RunningEmulator, arn: str) -> list[dict[str, Any]]:
    streams = emu.client("dynamodbstreams")
    shards: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"StreamArn": arn, "Limit": 7}
    while True:
        page = _call(streams.describe_stream, **kwargs)["StreamDescription"]
        shards.extend(page["Shards"])
        if "LastEvaluatedShardId" not in page:
            break
        kwargs["ExclusiveStartShardId"] = page["LastEvaluatedShardId"]
    known = {s["ShardId"] for s in shards}
    done: set[str] = set()
    records: list[dict[str, Any]] = []
    pending = list(shards)
    rng = random.Random(3)
    while pending:
        rng.shuffle(pending)  # any order that respects lineage must work
        ready = [s for s in pending if s.get("ParentShardId") not in known or s["ParentShardId"] in done]
        assert ready, "lineage has a cycle or a missing parent"
        shard = ready[0]
        pending.remove(shard)
        iterator = _call(
            streams.get_shard_iterator,
            StreamArn=arn,
            ShardId=shard["ShardId"],
            ShardIteratorType="TRIM_HORIZON",
        )["ShardIterator"]
        while iterator:
            try:
                response = streams.get_records(ShardIterator=iterator, Limit=50)
            except ClientError as exc:
                if exc.response["Error"]["Code"] not in RETRYABLE - {"ExpiredIteratorException"}:
                    raise
                time.sleep(0.02)
                continue
            records.extend(response["Records"])
            if not response["Records"] and "EndingSequenceNumber" not in shard["SequenceNumberRange"]:
                break  # open shard read to its current end
            iterator = response.get("NextShardIterator")
        done.add(shard["ShardId"])
    return records


def _run(writers: int, writes_each: int, keys_each: int) -> None:
    with running_emulator(
        partitions=3, rollover_seconds=3600, reads_per_shard_per_second=50, error_rate=0.05, seed=19
    ) as emu:
        table, arn = make_table(emu)
        expected: dict[str, list[Any]] = {}
        stop = threading.Event()

        def chaos() -> None:
            rng = random.Random(5)
            while not stop.wait(0.3):
                (emu.control.rollover if rng.random() < 0.6 else emu.control.split)(table)

        threads = [
            threading.Thread(
                target=_writer,
                args=(emu, table, [f"w{w}-k{k}" for k in range(keys_each)], writes_each, w, expected),
            )
            for w in range(writers)
        ]
        chaos_thread = threading.Thread(target=chaos)
        chaos_thread.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        chaos_thread.join()
        emu.control.rollover(table)  # close every shard that holds data
        lineage = emu.control.shards(table)
        assert sum(1 for s in lineage if s["parentShardId"]) > 3  # rollovers and splits happened

        records = _read_parents_first(emu, arn)
        seen_ids = [r["eventID"] for r in records]
        assert len(seen_ids) == len(set(seen_ids))
        got: dict[str, list[Any]] = {}
        for r in records:
            body = r["dynamodb"]
            got.setdefault(body["Keys"]["pk"]["S"], []).append(
                (r["eventName"], body.get("NewImage"), body.get("OldImage"), int(body["SequenceNumber"]))
            )
        assert set(got) == set(expected)
        for key, changes in expected.items():
            assert [c[:3] for c in got[key]] == [c[:3] for c in changes], key
            seqs = [c[3] for c in got[key]]
            assert seqs == sorted(seqs)
        assert emu.control.counters()["faults_injected"] > 0


def test_oracle_short() -> None:
    _run(writers=4, writes_each=300, keys_each=25)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("EMULATOR_LONG"), reason="long form: set EMULATOR_LONG=1")
def test_oracle_long() -> None:
    _run(writers=4, writes_each=1000, keys_each=60)

"""`consumer run` processes against moto's DynamoDB Streams (one shard, no lineage: the emulator
covers rollovers and splits). Two workers share the stream; the holder is SIGKILLed mid-run and the
other takes over after failover; the verdict: nothing lost, per-item order kept."""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import pytest

from ground.settings import load_settings
from tools.demo.fleet import LocalFleet
from tools.demo.load import LoadGenerator
from tools.demo.verdict import judge, read_changelog, read_oracle

pytestmark = pytest.mark.e2e


def create_source_table(endpoint: str) -> None:
    ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)
    ddb.create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )


def wait_until(condition, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.25)
    return bool(condition())


def test_two_workers_share_a_stream_and_survive_a_kill(
    config_dir: Path, moto_endpoint: str, tmp_path: Path
) -> None:
    settings = load_settings("e2e", config_dir)
    create_source_table(moto_endpoint)
    ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_endpoint)
    oracle = tmp_path / "oracle.jsonl"
    changelog = tmp_path / "changelog"
    load = LoadGenerator(ddb, settings.table, settings.load, oracle)
    # ~200 writes before any worker runs (TRIM_HORIZON must find them); a machine busy with other
    # work writes fewer a second, so the load runs until there are enough rather than for a time.
    while load.writes <= 100:
        load.run(duration_seconds=1.0)

    def delivered() -> int:
        return (
            len({(c.shard_id, c.sequence_number) for c in read_changelog(changelog, "pk")})
            if changelog.exists()
            else 0
        )

    with LocalFleet("e2e", config_dir, tmp_path / "logs") as fleet:
        first = fleet.start_worker()
        second = fleet.start_worker()
        assert wait_until(lambda: delivered() >= load.writes, 60), "the first writes never landed"
        # Kill whichever worker holds the (single) shard's lease, mid-stream.
        leases = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_endpoint).scan(
            TableName="e2e-fleet"
        )["Items"]
        holder = next(
            i["leaseOwner"]["S"]
            for i in leases
            if "leaseOwner" in i and not i["leaseKey"]["S"].startswith("__")
        )
        victim = first if f":{first.pid}:" in holder else second
        load.run(duration_seconds=0.5)
        fleet.kill(victim.name)
        load.run(duration_seconds=1.0)
        assert wait_until(lambda: delivered() >= load.writes, 60), f"delivered {delivered()} of {load.writes}"
        survivor = second if victim is first else first
        assert fleet.terminate(survivor.name) == 0, survivor.log_path.read_text()[-3000:]
    verdict = judge(read_oracle(oracle), read_changelog(changelog, "pk"))
    assert verdict.written == load.writes > 100
    assert (verdict.lost, verdict.unexpected, verdict.order_violations) == (0, 0, 0), verdict

"""Three tables' streams served by one fleet (``streams:``), end to end on the emulator.

Three ``consumer run`` processes share one leases table for three tables of two shards each (each
table with its own key names and its own change log); one table's shard splits and one worker is
SIGKILLed while all three tables take writes. Then, for each table: every change delivered, none
lost, none unexpected, each item's changes in the order they were made (so parents before
children), its figures in CloudWatch under its Stream dimension. And the leases are balanced
across the workers over every stream together.

"Balanced" here: every unfinished lease of every stream is held by a live worker, and the live
workers' counts differ by at most one (each holds floor or ceil of leases / workers). With three
workers and six leases that is two each, whichever tables they come from: not a table per worker,
and not one worker holding a whole table because it balanced that table alone.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from consumer.lease_keys import table_of
from consumer.leases.items import lease_to_item
from consumer.leases.model import ExtendedSequenceNumber, Lease
from emulator.testing import RunningEmulator, running_emulator
from ground.settings import LoadSettings, load_settings
from tests.e2e.fast_settings import FAST_WORKER_YAML, TELEMETRY_TO_LOGS_YAML
from tests.support import wait_for
from tools.dashboard.readback import read_log_group
from tools.demo.fleet import LocalFleet
from tools.demo.load import LoadGenerator
from tools.demo.verdict import judge, read_changelog, read_oracle

pytestmark = [pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]
APP = "e2e-streams"
TABLES = {"orders": "pk", "customers": "customer_id", "payments": "payment_id"}
# Leases of a stream no longer in streams: and a plain (one-table form) key: left alone.
ORPHANS = ("123456789012:archived:1795000000:shardId-00000001795000000000-0a0a0a0a", "shardId-plain-0001")


def write_config(directory: Path, endpoint: str, out: Path) -> None:
    entries = "".join(
        f"""
  - table: {{name: {table}, partition_key: {{name: {key}, type: S}}}}
    processing: {{options: {{destination: {out / table}}}}}"""
        for table, key in TABLES.items()
    )
    (directory / "streams.yaml").write_text(
        f"""
application_name: {APP}
region: us-east-1
endpoint_url: {endpoint}
{FAST_WORKER_YAML}
{TELEMETRY_TO_LOGS_YAML}
processing:
  processor: changelog
streams:{entries}
"""
    )


def create_tables(emu: RunningEmulator) -> None:
    ddb = emu.client("dynamodb")
    for table, key in TABLES.items():
        ddb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )


def holdings(emu: RunningEmulator) -> dict[str, list[str]]:
    """Unfinished lease key -> [owner's process name] (an empty list: unowned)."""
    ddb = emu.client("dynamodb")
    try:
        items = ddb.scan(TableName=APP, ConsistentRead=True)["Items"]
    except ddb.exceptions.ResourceNotFoundException:
        return {}
    return {
        item["leaseKey"]["S"]: [item["leaseOwner"]["S"].split("@")[0]] if "leaseOwner" in item else []
        for item in items
        if table_of(item["leaseKey"]["S"]) in TABLES and item.get("checkpoint", {}).get("S") != "SHARD_END"
    }


def balanced(emu: RunningEmulator, alive: set[str], leases_at_least: int) -> bool:
    held = holdings(emu)
    if len(held) < leases_at_least or any(
        owners[:1] == [] or owners[0] not in alive for owners in held.values()
    ):
        return False
    counts = Counter(owners[0] for owners in held.values())
    return set(counts) == alive and max(counts.values()) - min(counts.values()) <= 1


def test_three_tables_one_fleet_a_kill_and_a_split(tmp_path: Path) -> None:
    config, out = tmp_path / "config", tmp_path / "changelog"
    config.mkdir()
    environ = {"PYTHONPATH": str(REPO), "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    with running_emulator(partitions=2, rollover_seconds=3600, seed=7) as emu:
        write_config(config, emu.endpoint, out)
        create_tables(emu)
        settings = load_settings("streams", config)
        loads = [
            LoadGenerator(
                emu.client("dynamodb"),
                view.table,
                LoadSettings(writes_per_second=15, keys=25, seed=3 + i, duration_seconds=10),
                tmp_path / f"{view.table.name}.oracle.jsonl",
            )
            for i, view in enumerate(settings.per_stream())
        ]
        with LocalFleet("streams", config, tmp_path / "logs", environ) as fleet:
            for _ in range(3):
                fleet.start_worker()
            # Three workers, six leases of three tables: two each, across tables.
            wait_for(
                lambda: balanced(emu, {"worker-1", "worker-2", "worker-3"}, 6), 60, "2 leases per worker"
            )
            spread = holdings(emu)
            assert {table_of(key) for key in spread} == set(TABLES)
            # A stream that left streams: keeps its leases in the table; no worker may touch them.
            for key in ORPHANS:
                emu.client("dynamodb").put_item(
                    TableName=APP, Item=lease_to_item(Lease(key, None, 0, ExtendedSequenceNumber("4960")))
                )
            writers = [threading.Thread(target=load.run, args=(10,), daemon=True) for load in loads]
            for writer in writers:
                writer.start()
            time.sleep(3)
            children = emu.control.split("customers")
            time.sleep(2)
            fleet.kill("worker-2")
            for writer in writers:
                writer.join()
            # Two live workers; six open shards' leases plus the split's two children, less the
            # finished parent: seven, so three and four.
            wait_for(lambda: balanced(emu, {"worker-1", "worker-3"}, 7), 60, "the leases rebalanced on two")
            final = holdings(emu)

            def delivered(table: str) -> int:
                return len(
                    {(c.shard_id, c.sequence_number) for c in read_changelog(out / table, TABLES[table])}
                )

            for load, table in zip(loads, TABLES, strict=True):
                wait_for(lambda t=table, n=load.writes: delivered(t) >= n, 60, f"{table}'s changes delivered")
            orphans = {
                key: emu.client("dynamodb").get_item(
                    TableName=APP, Key={"leaseKey": {"S": key}}, ConsistentRead=True
                )["Item"]
                for key in ORPHANS
            }
        time.sleep(2)  # the stopped workers' last PutLogEvents
        documents = read_log_group(emu.client("logs"), f"/{APP}/metrics")
        verdicts: dict[str, Any] = {
            table: judge(read_oracle(tmp_path / f"{table}.oracle.jsonl"), read_changelog(out / table, key))
            for table, key in TABLES.items()
        }
        written = {table: load.writes for table, load in zip(TABLES, loads, strict=True)}
    assert fleet.workers["worker-2"].stopped_how == "SIGKILL"
    for key, item in orphans.items():
        assert "leaseOwner" not in item and item["checkpoint"]["S"] == "4960", (key, item)
        assert item["leaseCounter"]["N"] == "0", (key, item)
    for table, verdict in verdicts.items():
        # Writes before, during and after the split and the kill (a busy machine writes fewer).
        assert verdict.written == written[table] >= 30, table
        assert (verdict.lost, verdict.unexpected, verdict.order_violations) == (0, 0, 0), (table, verdict)
    # The split table's children were leased under its own namespace, the others untouched.
    customers = {key.rpartition(":")[2] for key in final if table_of(key) == "customers"}
    assert set(children) <= customers
    # What each table's shards processed reached CloudWatch under that table's Stream dimension.
    by_stream = {
        (d["Stream"], name)
        for d in documents
        if "Stream" in d
        for c in d["_aws"]["CloudWatchMetrics"]
        if ["Operation", "WorkerIdentifier", "Stream"] in c["Dimensions"]
        for name in (m["Name"] for m in c["Metrics"])
    }
    assert {(table, "RecordsProcessed") for table in TABLES} <= by_stream
    # Each processor saw its shards by DynamoDB's own ids (the namespace is the lease's, not theirs).
    landed = [path.relative_to(out) for path in out.rglob("*.jsonl.gz")]
    assert landed and not any(":" in str(path) for path in landed), landed[:3]
    assert Counter(table_of(key) for key in final) == {"orders": 2, "payments": 2, "customers": 3}

"""worker.on_trimmed: reload end to end: a worker stopped past the stream's retention comes back,
the gap reaches its processor, and the change log, the replica and the pipeline's table each equal
the source table again, with the reload's reads within the stated share of the table's capacity.

One ``consumer run`` process feeds both built-in sinks through one handler
(tests.e2e.processors.ChangelogAndReplica), so one worker's pace covers every reload. The emulator
keeps records for ``RETENTION`` seconds of its own clock: while the worker is stopped, items are
updated, deleted and created, and those records are trimmed before it comes back; then a few more
changes (readable) touch keys the gap touched too. The emulator charges each Scan what DynamoDB
would and logs when each arrived (emulator/capacity.py): the pace is measured on its side, from
the pages' starts, as the worker keeps it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from emulator.testing import RunningEmulator, running_emulator
from ground.settings import load_settings
from pipeline.reports import run_verify
from pipeline.snapshot_run import run_snapshot
from tests.e2e.fast_settings import FAST_WORKER_YAML
from tools.demo.fleet import LocalFleet
from tools.local_aws import create_local_tables

pytestmark = [pytest.mark.spark, pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]
RETENTION = 8  # seconds the emulator keeps stream records
READ_UNITS, SHARE = 20, 0.5  # the source table's provisioned reads, and the reloads' share of them
RATE = READ_UNITS * SHARE
PAD = "x" * 900  # ~1 KB items: a page of five reads two units (strongly consistent)
SOURCE_ONLY = ("_sourceSequenceNumber", "_sourceSequenceNumberTime")


def write_config(directory: Path, emu: RunningEmulator, tmp: Path) -> None:
    (directory / "reload.yaml").write_text(
        f"""
application_name: e2e-reload
region: us-east-1
endpoint_url: {emu.endpoint}
table:
  name: orders
  partition_key: {{name: pk, type: S}}
{FAST_WORKER_YAML}
  on_trimmed: reload
  reload_read_share: {SHARE}
  reload_scan_segments: 3
  reload_page_items: 5
metrics:
  destination: none
logs:
  retention_days: 1
processing:
  processor: tests.e2e.processors:ChangelogAndReplica
  options:
    destination: {tmp / "changelog"}
    table: orders
    replica_table: orders-replica
    endpoint_url: {emu.endpoint}
    gaps_file: {tmp / "gaps.jsonl"}
pipeline:
  changelog_uri: {tmp / "changelog"}
  snapshot_uri: {tmp / "snapshot"}
  stats_uri: {tmp / "stats"}
"""
    )


def create_tables(ddb: Any) -> None:
    for name, stream in (("orders", True), ("orders-replica", False)):
        ddb.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            ProvisionedThroughput={"ReadCapacityUnits": READ_UNITS, "WriteCapacityUnits": 100},
            **(
                {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}}
                if stream
                else {}
            ),
        )


def items(ddb: Any, table: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for page in ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            found[item["pk"]["S"]] = {k: v for k, v in item.items() if k not in SOURCE_ONLY}
    return found


def put(ddb: Any, key: str, n: int) -> None:
    ddb.put_item(TableName="orders", Item={"pk": {"S": key}, "n": {"N": str(n)}, "pad": {"S": PAD}})


def wait_for(check: Callable[[], bool], seconds: float, what: str, logs: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    tails = (
        "".join(
            f"\n--- {p.name}:\n" + p.read_text(errors="replace")[-3000:] for p in sorted(logs.glob("*.log"))
        )
        if logs is not None
        else ""
    )
    raise AssertionError(f"timed out waiting for {what}{tails}")


def owned_leases(ddb: Any, table: str) -> int:
    """Leases some worker holds (the worker is up and reading before the test writes)."""
    try:
        found = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    except ddb.exceptions.ResourceNotFoundException:
        return 0
    return sum(1 for lease in found if lease.get("leaseOwner"))


def changelog_state(root: Path) -> dict[str, dict[str, Any]]:
    """The change log folded without Spark, as pipeline/reloads.py reads it: the latest complete
    reload is the base at its start T, then every change created at or after T, per key in
    sequence order."""
    import gzip

    ends = [json.loads(p.read_text()) for p in root.glob("_reloads/*/end.json")]
    latest = max(ends, key=lambda e: e["reloadStartedAt"])
    start = latest["reloadStartedAt"]
    state: dict[str, dict[str, Any] | None] = {}
    for page in (root / "_reloads" / latest["reloadId"]).glob("*.jsonl.gz"):
        for line in gzip.decompress(page.read_bytes()).splitlines():
            change = json.loads(line)
            state[change["keys"]["pk"]["S"]] = change["newImage"]
    changes = []
    for obj in root.glob("shardId-*/*.jsonl.gz"):
        for line in gzip.decompress(obj.read_bytes()).splitlines():
            change = json.loads(line)
            if change["approximateCreationDateTime"] >= start:
                changes.append(change)
    for change in sorted(changes, key=lambda c: int(c["sequenceNumber"])):
        key = change["keys"]["pk"]["S"]
        state[key] = None if change["eventName"] == "REMOVE" else change["newImage"]
    return {k: v for k, v in state.items() if v is not None}


def test_a_worker_back_after_the_retention_repairs_every_sink_from_the_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    environ = {
        "PYTHONPATH": str(REPO),
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    gaps_file = tmp_path / "gaps.jsonl"
    with running_emulator(partitions=2, rollover_seconds=3600, trim_after_seconds=RETENTION, seed=5) as emu:
        write_config(config, emu, tmp_path)
        settings = load_settings("reload", config)
        ddb = emu.client("dynamodb")
        create_tables(ddb)
        create_local_tables(settings, ddb)
        with LocalFleet("reload", config, tmp_path / "logs", environ) as fleet:
            fleet.start_worker()
            logs = tmp_path / "logs"
            wait_for(
                lambda: owned_leases(ddb, settings.leases_table_name) >= 2, 60, "worker-1's leases", logs
            )
            for i in range(30):
                put(ddb, f"k{i:02d}", 0)
            wait_for(
                lambda: items(ddb, "orders-replica") == items(ddb, "orders"), 90, "the first writes", logs
            )
            assert fleet.terminate("worker-1") == 0

            # While it is stopped: updates, deletes and new items, then past the retention.
            for i in range(10):
                put(ddb, f"k{i:02d}", 1)
            for i in range(10, 15):
                ddb.delete_item(TableName="orders", Key={"pk": {"S": f"k{i:02d}"}})
            for i in range(30, 35):
                put(ddb, f"k{i:02d}", 1)
            wait_for(
                lambda: emu.control.counters().get("records_trimmed", 0) >= 30 + 20,  # all so far
                RETENTION + 10,
                "the emulator to trim the gap's records",
            )
            # Readable again: later changes to keys the gap touched.
            for i in range(3):
                put(ddb, f"k{i:02d}", 2)
            ddb.delete_item(TableName="orders", Key={"pk": {"S": "k15"}})
            expected_reloaded = len(items(ddb, "orders"))

            fleet.start_worker()

            def repaired() -> bool:
                ended = [g for g in read_gaps(gaps_file) if g["phase"] == "reloaded"]
                return len(ended) >= 2 and items(ddb, "orders-replica") == items(ddb, "orders")

            wait_for(repaired, 120, "both shards' reloads and the replica to match the table", logs)
            fleet.close()
            log = (tmp_path / "logs" / "worker-2.log").read_text(errors="replace")
        # The reloads' Scans (parallel: the test's own are plain).
        reads = [(at, units) for at, units, segments in emu.control.reads("orders") if segments]
        table = items(ddb, "orders")
        replica = items(ddb, "orders-replica")

        # The gap reached the processor, once as the gap and once when the reload was delivered.
        gaps = read_gaps(gaps_file)
        started = [g for g in gaps if g["phase"] == "gap"]
        ended = [g for g in gaps if g["phase"] == "reloaded"]
        assert len(started) == 2 and {g["shardId"] for g in started} == {g["shardId"] for g in ended}
        assert all(g["lastPosition"].isdigit() for g in started)  # where each shard's reading stopped
        assert all(g["recordsReloaded"] == expected_reloaded for g in ended)
        assert "RECORDS_TRIMMED_LOST" in log and "GAP_RELOADED" in log

        # The replica and the change log equal the table: deletes and updates of the gap included.
        assert len(table) == 29 and "k12" not in table and table["k05"]["n"] == {"N": "1"}
        assert replica == table
        folded = changelog_state(tmp_path / "changelog")
        assert {k: v for k, v in folded.items()} == table

        # The pipeline's table equals it too (the reload taken as its base), counts and a full compare.
        result = run_snapshot(spark, settings)
        assert result.items == len(table)
        verdict = run_verify(spark, settings, ddb)
        assert verdict.counts == {"match": len(table), "missing": 0, "extra": 0, "stale": 0}

    # The reloads' pace, as their Scans reached the emulator: between any two, no more units than
    # the share allows. The pacer keeps that between the pages' starts; the emulator logs their
    # arrivals, so a page held up on its way (a loaded machine: 112 ms once, on three pytest workers
    # and two benchmarks on two cores) makes its successor, started on time, look early by as much.
    # The slack is one page at the rate plus 100 ms: without pacing, pages arrive a few ms apart and
    # any run of three breaks this; at 1.5 x the rate, a whole reload does.
    assert sum(units for _, units in reads) >= 2 * 29 * 900 / 4096  # both reloads read every item
    page = max(units for _, units in reads) / RATE
    for i in range(len(reads)):
        for j in range(i + 1, len(reads)):
            consumed = sum(units for _, units in reads[i:j])
            assert consumed <= RATE * ((reads[j][0] - reads[i][0]) / 1000 + page + 0.1), (i, j, reads)


def read_gaps(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

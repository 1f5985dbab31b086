"""`consumer run` processes against the emulator's multi-shard stream: the worker, the processing
and the telemetry end to end.

One fleet run (about a minute and a half) is shared by the assertions of this module:

* two workers, then four, on a stream that rolls over every few seconds and splits on cue; one
  worker frozen past the failover time (SIGSTOP/SIGCONT: LEASE_LOST), one SIGKILLed, one SIGTERMed;
  records already in the stream before the first start (TRIM_HORIZON);
* 3 % of stream calls answered with HTTP 500, GetRecords throttled above 2 calls/s per shard;
* a processor that fails every fifth call of its process (retried) and is slow every eleventh (longer than the
  emulator's iterator expiry: expired iterators);
* a second application on the same stream keeping a DynamoDB replica;
* afterwards the shards are trimmed under a stopped worker's checkpoint and one worker restarts.

Then: every change once per (shard, sequence number) but the frozen worker's copy in flight, in per-item
delivery order (so parents before children); the replica equals the source; the EMF documents and both
log groups read back from the emulator's CloudWatch Logs hold what the run provoked, and RecordsProcessed
equals what the processor handled. A separate short test checks LATEST against TRIM_HORIZON.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulator.testing import RunningEmulator, running_emulator
from ground.settings import LoadSettings, load_settings
from tests.e2e.in_flight_copies import unexplained_copies
from tests.e2e.trimmed_under_workers import trim_under_live_workers
from tests.support import wait_for
from tools.dashboard.readback import points_of_all, read_log_group, read_log_messages
from tools.demo.fleet import LocalFleet
from tools.demo.load import LoadGenerator
from tools.demo.verdict import Verdict, judge, read_changelog, read_oracle

# The tests reading one fleet run share a pytest-xdist worker, and the run lives for that worker's
# session: a module-scoped fixture is torn down whenever the worker's next test is another module's,
# and the run (a minute of workers on the emulator) was made again for each test.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("fleet-run")]
REPO = Path(__file__).resolve().parents[2]
APP = "e2e-fleet"

WORKER = """
failover_time_millis: 3000
max_clock_skew_millis: 100
idle_time_between_reads_millis: 100
parent_shard_poll_interval_millis: 200
shard_sync_interval_millis: 2000
task_backoff_time_millis: 100
initial_position: {position}
on_trimmed: skip_to_trim_horizon
"""


def write_config(directory: Path, env: str, endpoint: str, app: str, processing: str, position: str) -> None:
    worker = "\n".join("  " + line for line in WORKER.format(position=position).strip().splitlines())
    (directory / f"{env}.yaml").write_text(
        f"""
application_name: {app}
region: us-east-1
endpoint_url: {endpoint}
table:
  name: orders
  partition_key: {{name: pk, type: S}}
worker:
{worker}
metrics:
  destination: logs
  shard_id_dimension: true
  flush_interval_seconds: 1
logs:
  retention_days: 1
processing:
{processing}
"""
    )


def create_tables(emu: RunningEmulator) -> None:
    ddb = emu.client("dynamodb")
    for name, stream in (("orders", True), ("orders-replica", False)):
        ddb.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            **(
                {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}}
                if stream
                else {}
            ),
        )


# The replica sink's own bookkeeping on each item: the change's sequence number and creation time.
REPLICA_ONLY = ("_sourceSequenceNumber", "_sourceSequenceNumberTime")


def scan(emu: RunningEmulator, table: str) -> dict[str, dict[str, Any]]:
    items: dict[str, dict[str, Any]] = {}
    for page in emu.client("dynamodb").get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            items[item["pk"]["S"]] = {k: v for k, v in item.items() if k not in REPLICA_ONLY}
    return items


def live_leases(emu: RunningEmulator, leases_table: str, process: str) -> set[str]:
    """Shards, unfinished, whose lease the worker process called ``process`` owns right now (none
    while no worker has created the leases table yet)."""
    ddb = emu.client("dynamodb")
    try:
        items = ddb.scan(TableName=leases_table, ConsistentRead=True)["Items"]
    except ddb.exceptions.ResourceNotFoundException:
        return set()
    return {
        item["leaseKey"]["S"]
        for item in items
        if not item["leaseKey"]["S"].startswith("__")
        and item.get("leaseOwner", {}).get("S", "").startswith(f"{process}@")
        and item.get("checkpoint", {}).get("S") != "SHARD_END"
    }


@dataclass
class FleetRun:
    emu: RunningEmulator
    tmp: Path
    verdict: Verdict
    written: int
    source: dict[str, dict[str, Any]]
    replica: dict[str, dict[str, Any]]
    worker_ids: dict[str, str]  # process name -> worker id (name@host:pid:nonce)
    frozen: str  # the process frozen past the failover time
    frozen_between: tuple[float, float]  # wall-clock seconds of its SIGSTOP and its SIGCONT
    stopped_how: dict[str, str]
    counters: dict[str, int]


def worker_ids(fleet: LocalFleet) -> dict[str, str]:
    ids = {}
    for name, process in fleet.workers.items():
        for line in process.log_path.read_text(errors="replace").splitlines():
            if f'"worker_id": "{name}@' in line:
                ids[name] = line.split('"worker_id": "', 1)[1].split('"', 1)[0]
                break
    return ids


@pytest.fixture(scope="session")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetRun]:
    tmp = tmp_path_factory.mktemp("fleet")
    config = tmp / "config"
    config.mkdir()
    with running_emulator(
        partitions=3,
        rollover_seconds=6,
        iterator_expiry_seconds=2,
        reads_per_shard_per_second=2,
        error_rate=0.03,
        seed=5,
    ) as emu:
        changelog, seen = tmp / "changelog", tmp / "seen"
        write_config(
            config, "e2e", emu.endpoint, APP,
            f"  processor: tests.e2e.processors:CountingChangelog\n  options:\n    destination: {changelog}\n"
            f"    table: orders\n    seen_dir: {seen}\n    fail_every: 5\n    slow_every: 11\n    slow_millis: 2500",
            "TRIM_HORIZON",
        )  # fmt: skip
        write_config(
            config, "replica", emu.endpoint, "e2e-replica",
            "  processor: dynamodb_replica\n  options:\n    table: orders-replica", "TRIM_HORIZON",
        )  # fmt: skip
        create_tables(emu)
        environ = {
            "PYTHONPATH": str(REPO),
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        settings = load_settings("e2e", config)
        load_settings_ = LoadSettings(writes_per_second=30, keys=60, seed=11, duration_seconds=24)
        load = LoadGenerator(emu.client("dynamodb"), settings.table, load_settings_, tmp / "oracle.jsonl")
        load.run(1.5)  # already in the stream before any worker starts: TRIM_HORIZON must deliver them
        with (
            LocalFleet("e2e", config, tmp / "logs", environ) as fleet,
            LocalFleet("replica", config, tmp / "replica-logs", environ) as replicas,
        ):
            fleet.start_worker()
            fleet.start_worker()
            replicas.start_worker()
            writer = threading.Thread(target=load.run, args=(24,), daemon=True)
            started = time.monotonic()
            writer.start()
            frozen_at: list[float] = []
            frozen: list[str] = []

            def freeze() -> None:
                # Past the failover time it must fence itself on waking, which it can only show while
                # it processes a shard: owning the lease is not enough (a lease handed over to a
                # worker is its own before the worker has adopted it). Balanced over four workers,
                # three open shards leave one worker with none, for as long as the others keep taking
                # their shards' children; so the frozen one is whichever of the two workers the script
                # does not stop processes a shard it owns.
                def processing(name: str) -> bool:
                    log = fleet.workers[name].log_path.read_text(errors="replace")
                    return any(f"{s}: INITIALIZING -> PROCESSING" in log for s in live_leases(emu, APP, name))

                def a_holder() -> bool:
                    frozen[:] = [n for n in ("worker-1", "worker-4") if processing(n)][:1]
                    return bool(frozen)

                wait_for(a_holder, 60, "worker-1 or worker-4 to hold a lease")
                fleet.pause(frozen[0])
                frozen_at.append(time.monotonic())

            def thaw() -> None:
                time.sleep(max(0.0, frozen_at[0] + 5 - time.monotonic()))  # 5 s > failover 3 s
                fleet.resume(frozen[0])
                frozen_at.append(time.monotonic())

            def stop_worker_3() -> None:
                # Stopped gracefully once it runs: a loaded machine can still be importing it at
                # 19 s, and a SIGTERM then stops a process that never was a worker.
                wait_for(lambda: "worker-3" in worker_ids(fleet), 60, "worker-3 to start")
                fleet.terminate("worker-3")

            script = [
                (6, lambda: (fleet.start_worker(), fleet.start_worker())),
                (9, freeze),
                (12, lambda: emu.control.split("orders")),
                (14, thaw),
                (16, lambda: fleet.kill("worker-2")),
                (19, stop_worker_3),
            ]
            for at, act in sorted(script, key=lambda s: s[0]):
                time.sleep(max(0.0, started + at - time.monotonic()))
                act()
            writer.join()
            written = load.writes

            def delivered() -> int:
                return len({(c.shard_id, c.sequence_number) for c in read_changelog(changelog, "pk")})

            wait_for(lambda: delivered() >= written, 150, f"{written} changes in the change log")
            wait_for(
                lambda: scan(emu, "orders") == scan(emu, "orders-replica"), 90, "the replica to converge"
            )
            source, replica = scan(emu, "orders"), scan(emu, "orders-replica")
            verdict = judge(read_oracle(tmp / "oracle.jsonl"), read_changelog(changelog, "pk"))
            replicas.close()

            trim_under_live_workers(emu, fleet, changelog, "orders")
            for process in fleet.alive():
                fleet.terminate(process.name)
            ids = worker_ids(fleet)
            how = {name: process.stopped_how or "running" for name, process in fleet.workers.items()}
        time.sleep(2)  # the last PutLogEvents of the stopped workers
        wall = time.time() - time.monotonic()  # the SIGSTOP's and the SIGCONT's times, wall-clock
        yield FleetRun(
            emu, tmp, verdict, written, source, replica, ids, frozen[0], (frozen_at[0] + wall, frozen_at[1] + wall),
            how, emu.control.counters(),
        )  # fmt: skip


def test_every_change_once_in_order_across_generations_kills_and_stops(fleet_run: FleetRun) -> None:
    verdict = fleet_run.verdict
    # ~765 writes paced at 30/s; a machine loaded several times over its cores paced 410 of them.
    assert verdict.written == fleet_run.written > 300
    assert (verdict.lost, verdict.unexpected, verdict.order_violations) == (0, 0, 0), verdict.lost_examples
    # Once per (shard, sequence number): no two workers wrote a shard at once (in_flight_copies.py).
    changelog, frozen = fleet_run.tmp / "changelog", fleet_run.frozen_between
    unexplained = unexplained_copies(verdict.duplicate_copies, changelog, frozen)
    assert not unexplained, (unexplained, verdict.duplicate_copies)
    counters = fleet_run.counters
    assert counters["rollovers"] >= 3 and counters["splits"] >= 1
    assert counters["expired_iterators"] >= 1  # the slow batches outlived their iterators
    # The trim under the thawed workers is checked in their logs (TrimmedDataAccessException from
    # GetRecords or, when an iterator expired meanwhile, from GetShardIterator): see the log test.
    assert counters["faults_injected"] >= 1 and counters["throttled"] >= 1  # HTTP 500s, LimitExceeded
    assert fleet_run.stopped_how["worker-2"] == "SIGKILL" and fleet_run.stopped_how["worker-3"] == "SIGTERM"


def test_the_replica_equals_the_source(fleet_run: FleetRun) -> None:
    assert len(fleet_run.source) > 20
    assert fleet_run.source == fleet_run.replica


def test_metrics_read_back_add_up(fleet_run: FleetRun) -> None:
    logs = fleet_run.emu.client("logs")
    points = points_of_all(read_log_group(logs, f"/{APP}/metrics"))
    by_name = defaultdict(list)
    for point in points:
        by_name[point.name].append(point)
    for name, unit in (("RecordsProcessed", "Count"), ("MillisBehindLatest", "Milliseconds"),
                       ("DataBytesProcessed", "Bytes"), ("RecordsRetried", "Count")):  # fmt: skip
        assert by_name[name], f"no {name} in the EMF documents"
        assert {p.unit for p in by_name[name]} == {unit}
    assert any(
        p.shard_id and ("ShardId",) in [tuple(d[-1:]) for d in p.dimension_sets]
        for p in by_name["RecordsProcessed"]
    )
    assert any(p.shard_id is None for p in points)  # worker-level metrics carry no ShardId
    # Workers that stopped gracefully flushed every document: their RecordsProcessed is what their
    # processor handled (the killed and the frozen worker are left out). A batch interrupted by the
    # stop before it landed is still counted by the lifecycle (KCL's definition: handed to a
    # processor that returned), so at most one batch per shard more.
    for name in sorted({"worker-1", "worker-3", "worker-4"} - {fleet_run.frozen}):
        worker_id = fleet_run.worker_ids[name]
        pid = worker_id.split(":")[-2]
        seen_file = fleet_run.tmp / "seen" / f"{pid}.txt"
        handled = sum(int(n) for n in seen_file.read_text().split()) if seen_file.exists() else 0
        processed = sum(
            sum(p.values) for p in by_name["RecordsProcessed"] if p.worker == worker_id and p.shard_id
        )
        assert handled <= processed <= handled + 1000, (
            f"{name}: RecordsProcessed {processed}, handled {handled}"
        )


def test_log_groups_hold_each_provoked_message(fleet_run: FleetRun) -> None:
    logs = fleet_run.emu.client("logs")
    worker_lines = read_log_messages(logs, f"/{APP}/lease-worker")
    app_lines = read_log_messages(logs, f"/{APP}/application")
    frozen = fleet_run.worker_ids[fleet_run.frozen]
    assert any(
        line.get("event") == "LEASE_LOST_SHUTDOWN" and line.get("worker_id") == frozen
        for line in worker_lines
    )
    assert any(
        line.get("worker_id") == frozen and "dropped" in str(line.get("message")) for line in worker_lines
    )  # the frozen worker fenced itself on waking
    trimmed = [line for line in worker_lines if line.get("event") == "RECORDS_TRIMMED_LOST"]
    # TrimmedDataAccessException (GetRecords or GetShardIterator past the oldest record), not only a
    # closed shard trimmed away entirely:
    assert any("TrimmedDataAccessException" in str(line.get("message")) for line in trimmed)
    assert any("iterator expired" in str(line.get("message")) for line in worker_lines)
    failures = [line for line in app_lines if "injected processor failure" in str(line.get("message"))]
    logged = {
        p.stem: p.read_text(errors="replace").count("injected processor failure")
        for p in (fleet_run.tmp / "logs").glob("*.log")
    }
    assert failures, (
        f"logged locally {logged}, application group {len(app_lines)} line(s), stopped {fleet_run.stopped_how}"
    )
    assert not any("injected processor failure" in str(line.get("message")) for line in worker_lines if
                   line.get("logger") == "tests.e2e.processors")  # fmt: skip


def test_latest_starts_at_the_tip_and_trim_horizon_at_the_oldest_record(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    environ = {"PYTHONPATH": str(REPO), "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    with running_emulator(partitions=2, rollover_seconds=3600, seed=2) as emu:
        create_tables(emu)
        for position in ("LATEST", "TRIM_HORIZON"):
            write_config(
                config, position.lower(), emu.endpoint, f"e2e-{position.lower()}",
                f"  processor: changelog\n  options:\n    destination: {tmp_path / position}", position,
            )  # fmt: skip
        ddb = emu.client("dynamodb")
        for i in range(20):
            ddb.put_item(TableName="orders", Item={"pk": {"S": f"before-{i}"}})
        with (
            LocalFleet("latest", config, tmp_path / "l", environ) as latest,
            LocalFleet("trim_horizon", config, tmp_path / "t", environ) as horizon,
        ):
            latest.start_worker()
            horizon.start_worker()

            def started(table: str) -> bool:
                try:
                    items = ddb.scan(TableName=table)["Items"]
                except Exception:
                    return False
                return (
                    sum(1 for i in items if "leaseOwner" in i and not i["leaseKey"]["S"].startswith("__"))
                    >= 2
                )

            wait_for(lambda: started("e2e-latest"), 60, "the LATEST worker to hold both leases")
            time.sleep(2)  # its iterators are at the tip now
            for i in range(20):
                ddb.put_item(TableName="orders", Item={"pk": {"S": f"after-{i}"}})

            def keys(position: str) -> set[str]:
                return {c.key for c in read_changelog(tmp_path / position, "pk")}

            wait_for(
                lambda: len(keys("TRIM_HORIZON")) == 40 and len(keys("LATEST")) >= 20, 90, "both to deliver"
            )
            time.sleep(1)
    assert keys("LATEST") == {f"after-{i}" for i in range(20)}
    assert keys("TRIM_HORIZON") == {f"{w}-{i}" for w in ("before", "after") for i in range(20)}

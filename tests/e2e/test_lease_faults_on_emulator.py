"""The lease core under a misbehaving DynamoDB, end to end on the emulator with `consumer run`
processes.

* Total outage: three workers run while every call to the leases tables (leases and ``-workers``)
  and every stream call fails — throttled or HTTP 500, alternating — for 2 × the failover time
  (the stream failing first, alone, until the workers have met it).
  A transient error must never end a worker: all three are alive afterwards and stop cleanly, and
  every record written during the run is delivered exactly once (no (shard, sequence number) twice
  in the change log, and no record handed to a processor twice) and in per-item order.
* KCL's reading of the leases table: during a fleet run and after a SIGKILL, every item in the
  leases table must parse by the Java KCL's rules (:func:`parse_kcl_lease`) and name a shard of the
  stream — a KCL application pointed at this table (or a tool built on KCL's serializer) would
  otherwise fail its ListLeases or try to process a "shard" that is not one.
* ``CHAOS_SCHEDULES=dense-pause,slow-table`` additionally runs ``consumer demo --chaos`` with those
  schedules (long: a couple of minutes each) and requires its verdict.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulator.testing import RunningEmulator, running_emulator
from ground.settings import LoadSettings, load_settings
from tests.e2e.fast_settings import TELEMETRY_TO_LOGS_YAML
from tests.kcl_format import KclParseError, parse_kcl_lease
from tests.kcl_format import kcl_problems as item_problems
from tests.support import wait_for
from tools.demo.fleet import LocalFleet
from tools.demo.load import LoadGenerator
from tools.demo.verdict import judge, read_changelog, read_oracle

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
APP = "lease-faults"
FAILOVER_MILLIS = 3000
CHAOS_SCHEDULES = [s.strip() for s in os.environ.get("CHAOS_SCHEDULES", "").split(",") if s.strip()]


def test_the_kcl_parser_accepts_kcl_items_and_refuses_what_kcl_cannot_read() -> None:
    """The parser itself: a lease as KCL writes it parses; each kind of item KCL chokes on is refused."""
    good = {
        "leaseKey": {"S": "shardId-00000001-abc"},
        "leaseOwner": {"S": "w1"},
        "leaseCounter": {"N": "7"},
        "checkpoint": {"S": "49600000000000000000001"},
        "checkpointSubSequenceNumber": {"N": "0"},
        "ownerSwitchesSinceCheckpoint": {"N": "1"},
        "parentShardId": {"SS": ["shardId-00000000-abc"]},
        "pendingOwner": {"S": "w2"},  # this product's addition: ignored by KCL
    }
    lease = parse_kcl_lease(good)
    assert (lease.lease_counter, lease.parent_shard_ids) == (7, frozenset({"shardId-00000000-abc"}))
    assert parse_kcl_lease({**good, "checkpoint": {"S": "SHARD_END"}}).checkpoint == "SHARD_END"
    without_owner = {k: v for k, v in good.items() if k not in ("leaseOwner", "checkpointSubSequenceNumber")}
    assert parse_kcl_lease(without_owner).lease_owner is None
    broken: list[dict[str, Any]] = [
        {k: v for k, v in good.items() if k != "leaseCounter"},
        {k: v for k, v in good.items() if k != "ownerSwitchesSinceCheckpoint"},
        {k: v for k, v in good.items() if k != "checkpoint"},
        {**good, "leaseCounter": {"S": "7"}},
        {**good, "leaseCounter": {"N": "7.5"}},
        {**good, "checkpoint": {"S": "soon"}},
        {**good, "leaseOwner": {"N": "1"}},
        {**good, "parentShardId": {"S": "shardId-00000000-abc"}},
        {**good, "childShardIds": {"L": []}},
        {"workerId": {"S": "w1"}, "heartbeatAt": {"N": "1"}},  # a heartbeat row
    ]
    for item in broken:
        with pytest.raises(KclParseError):
            parse_kcl_lease(item)


# ----------------------------------------------------------------------------------- the fleet


def write_config(directory: Path, endpoint: str, changelog: Path, seen: Path) -> None:
    (directory / "e2e.yaml").write_text(
        f"""
application_name: {APP}
region: us-east-1
endpoint_url: {endpoint}
table:
  name: orders
  partition_key: {{name: pk, type: S}}
worker:
  failover_time_millis: {FAILOVER_MILLIS}
  max_clock_skew_millis: 100
  idle_time_between_reads_millis: 100
  parent_shard_poll_interval_millis: 200
  shard_sync_interval_millis: 2000
  task_backoff_time_millis: 100
  initial_position: TRIM_HORIZON
{TELEMETRY_TO_LOGS_YAML}
processing:
  processor: tests.e2e.processors:CountingChangelog
  options:
    destination: {changelog}
    table: orders
    seen_dir: {seen}
"""
    )


def create_source(emu: RunningEmulator) -> None:
    emu.client("dynamodb").create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )


def lease_items(emu: RunningEmulator) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in emu.client("dynamodb").get_paginator("scan").paginate(TableName=APP, ConsistentRead=True):
        items.extend(page["Items"])
    return items


def owners(emu: RunningEmulator) -> dict[str, str]:
    """shard id -> owner of every unfinished lease that has one."""
    try:
        items = lease_items(emu)
    except Exception:  # the table may not exist yet
        return {}
    return {
        i["leaseKey"]["S"]: i["leaseOwner"]["S"]
        for i in items
        if "leaseOwner" in i and i.get("checkpoint", {}).get("S") != "SHARD_END"
    }


@dataclass
class Fleet:
    emu: RunningEmulator
    fleet: LocalFleet
    load: LoadGenerator
    writer: threading.Thread
    tmp: Path

    @property
    def changelog(self) -> Path:
        return self.tmp / "changelog"

    def delivered(self) -> int:
        return len({(c.shard_id, c.sequence_number) for c in read_changelog(self.changelog, "pk")})

    def handled(self) -> int:
        """Records the workers' processors were handed and landed, counted per handling."""
        return sum(int(n) for path in (self.tmp / "seen").glob("*.txt") for n in path.read_text().split())

    def all_held(self) -> bool:
        """At least three leases held and something delivered: the fleet is at work."""
        return len(owners(self.emu)) >= 3 and self.delivered() > 0

    def stop_and_judge(self, *, every_lease_held_again: bool = False) -> None:
        """Stop the load, wait for every acknowledged write in the change log (and, if asked, every
        lease held again), stop the workers (each must exit 0) and require each change delivered
        exactly once and in per-item order, to the change log and to the processors."""
        self.load.stop()
        self.writer.join(timeout=30)
        written = self.load.writes
        wait_for(lambda: self.delivered() >= written, 120, f"{written} changes in the change log")
        if every_lease_held_again:
            wait_for(self.all_held, 60, "every lease held again")
        dead = {p.name: p.popen.returncode for p in self.fleet.workers.values() if not p.alive}
        assert not dead, f"workers ended after the outage: {dead}"
        codes = {p.name: self.fleet.terminate(p.name) for p in self.fleet.alive()}
        assert codes == {"worker-1": 0, "worker-2": 0, "worker-3": 0}, codes
        verdict = judge(read_oracle(self.tmp / "oracle.jsonl"), read_changelog(self.changelog, "pk"))
        assert verdict.written == written > 300
        assert (verdict.lost, verdict.unexpected, verdict.order_violations) == (0, 0, 0), (
            verdict.lost_examples
        )
        assert verdict.duplicates == 0, verdict.duplicate_objects
        # Exactly once to the processors too: a replay that overwrote its own object, or that the sink
        # skipped as already landed, still counts here.
        assert self.handled() == verdict.delivered, self.redelivery_lines()[:5]

    def redelivery_lines(self) -> list[str]:
        return [
            line
            for process in self.fleet.workers.values()
            for line in process.log_path.read_text(errors="replace").splitlines()
            if "already landed by an earlier delivery" in line
        ]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """Three `consumer run` workers on a 3-partition stream that rolls over every 8 s, with a
    steady load already running; everything is stopped whatever the test did."""
    config = tmp_path / "config"
    config.mkdir()
    environ = {
        "PYTHONPATH": str(REPO),
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    with running_emulator(partitions=3, rollover_seconds=8, reads_per_shard_per_second=20, seed=13) as emu:
        write_config(config, emu.endpoint, tmp_path / "changelog", tmp_path / "seen")
        create_source(emu)
        settings = load_settings("e2e", config)
        load = LoadGenerator(
            emu.client("dynamodb"),
            settings.table,
            LoadSettings(writes_per_second=25, keys=40, seed=17, duration_seconds=600),
            tmp_path / "oracle.jsonl",
        )
        writer = threading.Thread(target=load.run, args=(600,), name="load", daemon=True)
        with LocalFleet("e2e", config, tmp_path / "logs", environ) as local:
            for _ in range(3):
                local.start_worker()
            writer.start()
            try:
                yield Fleet(emu, local, load, writer, tmp_path)
            finally:
                load.stop()
                writer.join(timeout=30)


# The stream fails first, alone, until the workers have met it: once the leases tables fail too,
# no lease is renewed and within the failover time every shard consumer stops reading, so a worker
# starved through that short window (a loaded CI machine: stop 58's run) would otherwise never call
# the stream during the outage at all.
STREAM_FIRST: dict[str, float | str] = {"error_rate": 1.0}
OUTAGE_PHASES: tuple[dict[str, float | str], ...] = (
    # Leases tables throttled, every stream call answered 500.
    {"table_throttle_rate": 1.0, "table_error_rate": 0.0, "error_rate": 1.0},
    # Leases tables answered 500; GetRecords and DescribeStream throttled (a hundredth of a call per
    # second), the other stream calls 500.
    {
        "table_throttle_rate": 0.0,
        "table_error_rate": 1.0,
        "error_rate": 1.0,
        "reads_per_shard_per_second": 0.01,
        "describe_stream_per_second": 0.01,
    },
)
# The emulator's counters that show each phase reached the workers' calls.
PHASE_EVIDENCE: tuple[tuple[str, ...], ...] = (
    ("table_throttled", "faults_injected"),
    ("table_faults_injected",),
)
LIFTED: dict[str, float | str] = {
    "table_throttle_rate": 0.0,
    "table_error_rate": 0.0,
    "error_rate": 0.0,
    "reads_per_shard_per_second": 20.0,
    "describe_stream_per_second": 10.0,
}


def _reached(run: Fleet, faults: dict[str, float | str], evidence: tuple[str, ...]) -> float:
    """Set ``faults`` and wait until the emulator's ``evidence`` counters show they met the workers'
    calls; returns the seconds that took. On a starved machine that may be longer than a phase: the
    phase then lasts until they have (a longer outage, which the promises must survive too)."""
    control = run.emu.control
    started = control.counters()
    control.set_faults(**faults)
    began = time.monotonic()

    def moved() -> bool:
        return all(control.counters().get(c, 0) > started.get(c, 0) for c in evidence)

    try:
        wait_for(moved, 60, f"the outage to reach the workers' calls ({', '.join(evidence)})")
    except AssertionError as exc:
        now = control.counters()
        counts = {c: (started.get(c, 0), now.get(c, 0)) for c in sorted(set(now) | set(started))}
        ended = {p.name: p.popen.returncode for p in run.fleet.workers.values() if not p.alive}
        tails = {
            p.name: p.log_path.read_text(errors="replace").splitlines()[-5:]
            for p in run.fleet.workers.values()
        }
        raise AssertionError(
            f"{exc}; counters (before, now): {counts}; workers ended: {ended}; last log lines: {tails}"
        ) from None
    return time.monotonic() - began


def test_no_worker_ends_and_nothing_is_replayed_when_the_leases_table_and_the_stream_fail_for_two_failover_times(
    fleet: Fleet,
) -> None:
    run = fleet
    wait_for(run.all_held, 90, "three workers holding every lease and delivering")
    control = run.emu.control
    before = control.counters()
    control.set_faults(table_fault_tables=f"{APP},{APP}-workers")
    phase_seconds = FAILOVER_MILLIS / 1000  # two phases: 2 × the failover time in all
    try:
        _reached(run, STREAM_FIRST, ("faults_injected",))
        for phase, evidence in zip(OUTAGE_PHASES, PHASE_EVIDENCE, strict=True):
            time.sleep(max(0.0, phase_seconds - _reached(run, phase, evidence)))
    finally:
        control.set_faults(**LIFTED)
    during = control.counters()
    # The outage really hit both: refused lease-table calls of both kinds, failed stream calls.
    for counter in ("table_throttled", "table_faults_injected", "faults_injected"):
        assert during.get(counter, 0) > before.get(counter, 0), counter
    dead = {p.name: p.popen.returncode for p in run.fleet.workers.values() if not p.alive}
    assert not dead, f"workers ended by transient errors: {dead}"

    time.sleep(2 * FAILOVER_MILLIS / 1000)  # records written after the recovery too
    run.stop_and_judge(every_lease_held_again=True)


def kcl_problems(emu: RunningEmulator) -> list[str]:
    """Every way the leases table, read now, breaks KCL's reading of it."""
    shards = {s["shardId"] for s in emu.control.shards("orders")}
    return [problem for item in lease_items(emu) for problem in item_problems(item, shards)]


def test_every_leases_table_item_is_a_kcl_lease_of_a_real_shard_during_a_run_and_after_a_kill(
    fleet: Fleet,
) -> None:
    run = fleet
    wait_for(run.all_held, 90, "three workers holding every lease and delivering")
    problems: list[str] = []
    for _ in range(6):  # while leases are taken, balanced and checkpointed
        problems += kcl_problems(run.emu)
        time.sleep(0.5)
    held = owners(run.emu)
    assert held, "no lease is held"
    victim = sorted(held.values())[0].split("@", 1)[0]  # worker-N@host:pid:nonce -> worker-N
    run.fleet.kill(victim)

    def taken_over() -> bool:
        held = owners(run.emu)
        return bool(held) and not any(owner.startswith(f"{victim}@") for owner in held.values())

    wait_for(taken_over, 60, f"the leases of the SIGKILLed {victim} to be taken over")
    for _ in range(4):
        problems += kcl_problems(run.emu)
        time.sleep(0.5)
    assert not sorted(set(problems)), sorted(set(problems))[:10]
    assert lease_items(run.emu), "the leases table is empty"


# ------------------------------------------------------------------------- chaos demo schedules


@pytest.mark.skipif(not CHAOS_SCHEDULES, reason="long: set CHAOS_SCHEDULES=dense-pause,slow-table")
@pytest.mark.parametrize("schedule", CHAOS_SCHEDULES or ["dense-pause"])
def test_chaos_schedule_demo_verdict(tmp_path: Path, schedule: str) -> None:
    from tests.e2e.test_demo import figure, run_demo

    output = run_demo(tmp_path, 40, "--chaos", "1", "--schedule", schedule)
    assert f"schedule {schedule}" in output
    if schedule == "dense-pause":
        assert "SIGSTOP worker-" in output and "SIGCONT worker-" in output
        assert "shorter than the failover time" in output and "the whole fleet" in output
    elif schedule == "slow-table":
        assert "table-faults (leases tables) on" in output
    assert figure(output, "  of which unexplained") == "0"
    assert figure(output, "changes written") == figure(output, "changes delivered (distinct)")

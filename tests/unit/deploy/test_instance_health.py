"""The instance-side health pieces, without an instance: the heartbeat the worker writes, how the
bootstrap and the watchdog judge it, what the watchdog asks of Auto Scaling, and the bootstrap's
FAILURE signal when boot itself breaks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from consumer.clock import FakeClock
from consumer.telemetry.health import HeartbeatFile
from deploy.bootstrap import boot
from deploy.health import (
    HealthJudge,
    Heartbeat,
    Judgement,
    PeerView,
    fresh_workers,
    read_heartbeat,
    wait_for_healthy,
)
from deploy.plan import BootPlan, Layout
from deploy.units import unit_files
from deploy.watchdog import Watchdog
from tests.unit_runner import parse_service

REPO = Path(__file__).resolve().parents[3]


def plan(**changes: Any) -> BootPlan:
    values: dict[str, Any] = {
        "env": "dev",
        "region": "eu-west-1",
        "worker_processes": 2,
        "stop_timeout_seconds": 105,
        "agent_config": {"logs": {}},
        "stack_name": "app-dev",
        "signal_resource": "FleetGroupASG",
        "group_name": "app-dev-workers",
        "lifecycle_hook_name": "app-dev-release-leases",
        "health_timeout_seconds": 60,
        "heartbeat_max_age_seconds": 120,
        "crash_loop_restarts": 3,
        "crash_loop_window_seconds": 300,
    }
    values.update(changes)
    return BootPlan(**values)


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def count(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("count", {"args": args}))

    def gauge(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("gauge", {"args": args}))

    def timing(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("timing", {"args": args}))

    def complete_lifecycle_action(self, **kwargs: Any) -> None:
        self.calls.append(("complete_lifecycle_action", kwargs))

    def set_instance_health(self, **kwargs: Any) -> None:
        self.calls.append(("set_instance_health", kwargs))


def test_the_heartbeat_file_says_when_the_last_round_was_attempted_and_when_one_last_succeeded(
    tmp_path: Path,
) -> None:
    path = tmp_path / "health" / "worker-1"
    clock = FakeClock(start_millis=1_000_000)
    heartbeat = HeartbeatFile(path, clock)
    heartbeat.record(True)
    clock.advance(5_000)
    heartbeat.record(False, "LeaseStoreThrottledError: Scan app: leases table app is throttling")
    assert json.loads(path.read_text()) == {
        "at": 1_005_000,
        "ok_at": 1_000_000,
        "error": "LeaseStoreThrottledError: Scan app: leases table app is throttling",
    }
    os.utime(path, (1_005.0, 1_005.0))
    beat = read_heartbeat(path, now=1_010.0)
    assert beat == Heartbeat(
        5.0, 10.0, 1_000.0, "LeaseStoreThrottledError: Scan app: leases table app is throttling"
    )
    # A file from an older worker (a bare number) is a good round at its mtime.
    path.write_text("1000000\n")
    os.utime(path, (1_002.0, 1_002.0))
    assert read_heartbeat(path, now=1_010.0) == Heartbeat(8.0, 8.0, 1_002.0)


def test_the_worker_records_every_round_it_attempts(tmp_path: Path) -> None:
    """The taker tells its observer of each round: the reads succeeded, or why not."""
    from consumer.leases.coordinator import LeaseCoordinator
    from consumer.leases.errors import LeaseStoreThrottledError
    from consumer.leases.memory import InMemoryLeaseStore
    from consumer.settings import WorkerSettings

    store = InMemoryLeaseStore()
    seen: list[tuple[bool, str | None]] = []
    worker = LeaseCoordinator(
        store, "w", WorkerSettings(), FakeClock(), on_round=lambda ok, why: seen.append((ok, why))
    )
    worker.heartbeat_once()
    worker.take_round()

    def refuse(*_: Any, **__: Any) -> Any:
        raise LeaseStoreThrottledError("Scan app: leases table app is throttling")

    store.scan = refuse  # type: ignore[method-assign]
    store.scan_workers = refuse  # type: ignore[method-assign]
    worker.take_round()
    assert seen[0] == (True, None)
    assert seen[-1][0] is False and "throttling" in str(seen[-1][1])


def test_a_heartbeat_that_cannot_be_written_never_stops_the_worker(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    HeartbeatFile(blocker / "worker-1").record(True)  # logs once, raises nothing


def record(
    layout: Layout, instance: str, attempted: float, ok_at: float | None, error: str | None = None
) -> None:
    path = layout.heartbeat(instance)
    path.parent.mkdir(parents=True, exist_ok=True)
    ok = None if ok_at is None else int(ok_at * 1000)
    path.write_text(json.dumps({"at": int(attempted * 1000), "ok_at": ok, "error": error}))
    os.utime(path, (attempted, attempted))


def test_fresh_means_a_good_round_since_boot_and_young_enough(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    now = time.time()
    record(layout, "1", now - 5, now - 5)
    record(layout, "2", now - 1000, now - 1000)  # left from an earlier boot
    assert fresh_workers(p, layout, since=now - 60, now=now) == ["1"]
    record(layout, "2", now - 2, now - 900, "throttled")  # attempting, but no good round since boot
    assert fresh_workers(p, layout, since=now - 60, now=now) == ["1"]
    record(layout, "2", now - 1, now - 1)
    assert fresh_workers(p, layout, since=now - 60, now=now) == ["1", "2"]


def test_boot_waits_until_the_deadline_then_gives_up(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan(health_timeout_seconds=30)
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    record(layout, "1", time.time(), time.time())
    assert not wait_for_healthy(p, layout, since=time.time() - 5, sleep=sleep, clock=lambda: clock[0])
    assert clock[0] >= 30
    record(layout, "2", time.time(), time.time())
    assert wait_for_healthy(p, layout, since=time.time() - 5, sleep=sleep, clock=lambda: clock[0])


FINE = Heartbeat(1.0, 1.0, 0.0)
FAILING = Heartbeat(1.0, 500.0, 0.0, "LeaseStoreUnavailableError: InternalServerError")
STALLED = Heartbeat(500.0, 500.0, 0.0)
PEERS_FINE = PeerView(readable=True, fresh_peers=6)
NOBODY_FINE = PeerView(readable=True, fresh_peers=0)
UNREADABLE = PeerView(readable=False, error="ProvisionedThroughputExceededException")


def test_the_judge_waits_out_the_grace() -> None:
    judge = HealthJudge(plan(), started=0.0, grace_seconds=600)
    assert judge.observe(100.0, {"1": Heartbeat(None, None, None)}, 0, lambda: PEERS_FINE) == Judgement()
    assert judge.observe(700.0, {"1": FINE, "2": FINE}, 0, lambda: PEERS_FINE) == Judgement()


@pytest.mark.parametrize(
    ("beats", "view", "blamed"),
    [
        # A DynamoDB brownout: every worker's rounds fail, and the watchdog cannot read either.
        ({"1": FAILING, "2": FAILING}, UNREADABLE, False),
        # Everyone's rounds fail though the watchdog reads: the fleet shares it.
        ({"1": FAILING, "2": FAILING}, NOBODY_FINE, False),
        # Only mine fail while others are fine: mine.
        ({"1": FAILING, "2": FINE}, PEERS_FINE, True),
        # A loop that stopped while others are fine, or while the table answers: mine.
        ({"1": STALLED, "2": FINE}, PEERS_FINE, True),
        ({"1": STALLED, "2": STALLED}, NOBODY_FINE, True),
        # Stopped loops while nothing answers the watchdog either: not provably mine.
        ({"1": STALLED, "2": FAILING}, UNREADABLE, False),
    ],
)
def test_the_judge_blames_the_instance_only_for_its_own_failure(
    beats: dict[str, Heartbeat], view: PeerView, blamed: bool
) -> None:
    judge = HealthJudge(plan(), started=0.0, grace_seconds=0)
    judgement = judge.observe(1_000.0, beats, 0, lambda: view)
    assert (judgement.unhealthy is not None) == blamed, judgement
    assert (judgement.excused is not None) == (not blamed), judgement


def test_the_judge_asks_the_peers_only_when_a_worker_looks_unwell() -> None:
    asked: list[bool] = []
    judge = HealthJudge(plan(), started=0.0, grace_seconds=0)
    judge.observe(1_000.0, {"1": FINE, "2": FINE}, 0, lambda: asked.append(True) or PEERS_FINE)  # type: ignore[func-returns-value]
    assert asked == []


def test_the_judge_calls_a_crash_loop_even_when_each_run_reported() -> None:
    judge = HealthJudge(
        plan(crash_loop_restarts=3, crash_loop_window_seconds=300), started=0.0, grace_seconds=0
    )
    fresh = {"1": FINE, "2": FINE}
    assert judge.observe(10.0, fresh, restarts=0).unhealthy is None
    assert judge.observe(20.0, fresh, restarts=2).unhealthy is None
    verdict = judge.observe(30.0, fresh, restarts=3).unhealthy
    assert verdict is not None and "crash loop" in verdict
    # Restarts spread wider than the window are not a loop.
    slow = HealthJudge(
        plan(crash_loop_restarts=3, crash_loop_window_seconds=300), started=0.0, grace_seconds=0
    )
    for step in range(6):
        assert slow.observe(step * 400.0, fresh, restarts=step).unhealthy is None


class Group(Recording):
    """An autoscaling client whose group has the given instances (id -> (lifecycle state, health))."""

    def __init__(self, instances: dict[str, tuple[str, str]]) -> None:
        super().__init__()
        self.instances = instances

    def describe_auto_scaling_groups(self, **kwargs: Any) -> dict[str, Any]:
        return {
            "AutoScalingGroups": [
                {
                    "Instances": [
                        {"InstanceId": i, "LifecycleState": s, "HealthStatus": h}
                        for i, (s, h) in self.instances.items()
                    ]
                }
            ]
        }


def test_the_watchdog_reports_unhealthy_once_and_one_instance_at_a_time(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    client = Group({"i-0abc": ("InService", "Healthy"), "i-0def": ("Terminating", "Unhealthy")})
    watchdog = Watchdog(
        p,
        layout,
        client,
        "i-0abc",
        HealthJudge(p, started=0.0, grace_seconds=0),
        lifecycle_state=lambda: "InService",
        restarts=lambda: 0,
        stop=lambda: None,
        peers=lambda: NOBODY_FINE,  # the table answers: a worker with no heartbeat at all is mine
    )
    assert watchdog.step(time.time())
    assert client.calls == []  # another instance is being replaced: wait
    client.instances["i-0def"] = ("InService", "Healthy")
    assert watchdog.step(time.time())
    assert watchdog.step(time.time())
    assert client.calls == [
        (
            "set_instance_health",
            {"InstanceId": "i-0abc", "HealthStatus": "Unhealthy", "ShouldRespectGracePeriod": False},
        )
    ]


def test_the_watchdog_leaves_a_fleet_wide_outage_alone(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    now = time.time()
    for instance in ("1", "2"):
        record(layout, instance, now - 1, now - 600, "LeaseStoreThrottledError: throttling")
    client = Group({"i-0abc": ("InService", "Healthy")})
    watchdog = Watchdog(
        p,
        layout,
        client,
        "i-0abc",
        HealthJudge(p, started=0.0, grace_seconds=0),
        lifecycle_state=lambda: "InService",
        restarts=lambda: 0,
        stop=lambda: None,
        peers=lambda: UNREADABLE,
    )
    for _ in range(3):
        assert watchdog.step(now)
    assert client.calls == []


def test_the_watchdog_hands_over_on_termination(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    client, stopped = Recording(), []
    watchdog = Watchdog(
        p,
        layout,
        client,
        "i-0abc",
        HealthJudge(p, started=time.time(), grace_seconds=600),
        lifecycle_state=lambda: "Terminated",
        stop=lambda: stopped.append(True),
    )
    assert watchdog.step(time.time()) is False
    assert stopped == [True]
    assert client.calls == [
        (
            "complete_lifecycle_action",
            {
                "LifecycleHookName": "app-dev-release-leases",
                "AutoScalingGroupName": "app-dev-workers",
                "LifecycleActionResult": "CONTINUE",
                "InstanceId": "i-0abc",
            },
        )
    ]


def test_the_probe_counts_fresh_workers_of_other_hosts_in_the_workers_table() -> None:
    import boto3
    from moto import mock_aws

    from deploy.watchdog import WorkersTableProbe

    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        probe = WorkersTableProbe(client, "app-workers", "ip-10-0-0-1", horizon_seconds=10.5)
        assert not probe().readable  # no table: cannot tell
        client.create_table(
            TableName="app-workers",
            KeySchema=[{"AttributeName": "workerId", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "workerId", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        now = int(time.time() * 1000)
        for worker, at in (
            ("ip-10-0-0-1-1@ip-10-0-0-1:10:aa", now),  # mine
            ("ip-10-0-0-2-1@ip-10-0-0-2:11:bb", now - 2_000),  # another host, fresh
            ("ip-10-0-0-3-1@ip-10-0-0-3:12:cc", now - 60_000),  # another host, expired
        ):
            client.put_item(
                TableName="app-workers",
                Item={
                    "workerId": {"S": worker},
                    "heartbeatAt": {"N": str(at)},
                    "heartbeatCounter": {"N": "3"},
                },
            )
        client.put_item(
            TableName="app-workers", Item={"workerId": {"S": "__app__#lineage"}, "generation": {"N": "2"}}
        )
        assert probe() == PeerView(readable=True, fresh_peers=1)


def test_the_unit_runner_reads_the_units_the_bootstrap_writes(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    units = unit_files(plan(streams_endpoint_url="https://vpce-1.streams.example"), layout)
    spec = parse_service(units["consumer-worker@.service"], "2", "ip-10-0-0-1")
    assert spec.working_directory == layout.source_dir
    assert spec.environment == {
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL_DYNAMODB_STREAMS": "https://vpce-1.streams.example",
    }
    assert spec.command[:3] == [str(layout.venv_dir / "bin" / "consumer"), "run", "--env"]
    assert "ip-10-0-0-1-2" in spec.command
    assert str(layout.heartbeat("2")) in spec.command
    watchdog = parse_service(units["consumer-watchdog.service"], "", "h")
    assert watchdog.command[:3] == [str(layout.venv_dir / "bin" / "python"), "-m", "deploy.watchdog"]


class SignalOnly:
    def __init__(self) -> None:
        self.signals: list[str] = []

    def ensure_user(self, name: str, home: Path) -> None:
        raise AssertionError("boot went past a broken asset")

    def chown(self, path: Path, user: str) -> None:
        raise AssertionError("boot went past a broken asset")

    def start_agent(self, config_file: Path) -> None:
        raise AssertionError("boot went past a broken asset")

    def enable_and_start(self, units: Any) -> None:
        raise AssertionError("boot went past a broken asset")

    def instance_id(self) -> str:
        return "i-0abc"

    def signal(self, plan: BootPlan, status: str, reason: str) -> None:
        self.signals.append(status)


def test_a_broken_asset_signals_failure(tmp_path: Path) -> None:
    archive = tmp_path / "asset.zip"
    archive.write_bytes(b"not a zip")
    host = SignalOnly()
    assert boot(plan(), Layout(tmp_path / "root"), archive, host) is False
    assert host.signals == ["FAILURE"]


def test_the_bootstrap_runs_from_the_archive_with_the_standard_library_only(tmp_path: Path) -> None:
    """As the user data runs it (``PYTHONPATH=asset.zip python3.11 -m deploy.bootstrap``), before any
    virtualenv exists: ``-S`` leaves site-packages off the path, so a third-party import would fail."""
    archive = tmp_path / "asset.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for source in sorted((REPO / "deploy").glob("*.py")):
            bundle.write(source, f"deploy/{source.name}")
    ran = subprocess.run(
        [sys.executable, "-S", "-m", "deploy.bootstrap", "--help"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(archive)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "--archive" in ran.stdout and "--root" in ran.stdout

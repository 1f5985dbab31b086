"""The instance-side health pieces, without an instance: the heartbeat the worker writes, how the
bootstrap and the watchdog judge it, what the watchdog asks of Auto Scaling, and the bootstrap's
FAILURE signal when boot itself breaks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from consumer.telemetry.health import HeartbeatFile, HeartbeatMetrics
from consumer.telemetry.metrics import NullMetrics
from deploy.bootstrap import boot
from deploy.health import HealthJudge, fresh_workers, heartbeat_ages, wait_for_healthy
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


def beat(layout: Layout, instance: str, at: float) -> None:
    path = layout.heartbeat(instance)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    os.utime(path, (at, at))


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


def test_the_worker_renews_its_heartbeat_at_each_lease_taking_round_only(tmp_path: Path) -> None:
    inner = Recording()
    path = tmp_path / "health" / "worker-1"
    metrics = HeartbeatMetrics(inner, HeartbeatFile(path))
    metrics.count("ProcessTask", "RecordsProcessed", 5)
    metrics.gauge("TakeLeases", "TotalLeases", 3, "Count")
    metrics.timing("TakeLeases", "TakeLeases", 12.0, True)
    assert not path.exists()
    metrics.gauge("TakeLeases", "NumWorkers", 2, "Count")
    assert path.is_file()
    # Every call still reaches the recorder unchanged.
    assert [name for name, _ in inner.calls] == ["count", "gauge", "timing", "gauge"]
    assert inner.calls[-1][1]["args"][:3] == ("TakeLeases", "NumWorkers", 2)


def test_a_heartbeat_that_cannot_be_written_never_stops_the_worker(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    metrics = HeartbeatMetrics(NullMetrics(), HeartbeatFile(blocker / "worker-1"))
    metrics.gauge("TakeLeases", "NumWorkers", 1, "Count")  # logs once, raises nothing


def test_fresh_means_written_since_boot_and_young_enough(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    now = time.time()
    beat(layout, "1", now - 5)
    beat(layout, "2", now - 1000)  # left from an earlier boot
    assert fresh_workers(p, layout, since=now - 60, now=now) == ["1"]
    ages = heartbeat_ages(p, layout, now)
    assert ages["1"] is not None and ages["1"] < 10
    beat(layout, "2", now - 2)
    assert fresh_workers(p, layout, since=now - 60, now=now) == ["1", "2"]


def test_boot_waits_until_the_deadline_then_gives_up(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan(health_timeout_seconds=30)
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    beat(layout, "1", time.time())
    assert not wait_for_healthy(p, layout, since=time.time() - 5, sleep=sleep, clock=lambda: clock[0])
    assert clock[0] >= 30
    beat(layout, "2", time.time())
    assert wait_for_healthy(p, layout, since=time.time() - 5, sleep=sleep, clock=lambda: clock[0])


def test_the_judge_waits_out_the_grace_then_names_silent_workers() -> None:
    judge = HealthJudge(plan(), started=0.0, grace_seconds=600)
    assert judge.observe(100.0, {"1": None, "2": None}, restarts=0) is None  # still booting
    assert judge.observe(700.0, {"1": 5.0, "2": 30.0}, restarts=0) is None
    verdict = judge.observe(800.0, {"1": 5.0, "2": 500.0}, restarts=0)
    assert verdict is not None and "worker(s) 2" in verdict


def test_the_judge_calls_a_crash_loop_even_when_each_run_reported() -> None:
    judge = HealthJudge(
        plan(crash_loop_restarts=3, crash_loop_window_seconds=300), started=0.0, grace_seconds=0
    )
    fresh = {"1": 1.0, "2": 1.0}
    assert judge.observe(10.0, fresh, restarts=0) is None
    assert judge.observe(20.0, fresh, restarts=2) is None
    verdict = judge.observe(30.0, fresh, restarts=3)
    assert verdict is not None and "crash loop" in verdict
    # Restarts spread wider than the window are not a loop.
    slow = HealthJudge(
        plan(crash_loop_restarts=3, crash_loop_window_seconds=300), started=0.0, grace_seconds=0
    )
    for step in range(6):
        assert slow.observe(step * 400.0, fresh, restarts=step) is None


def test_the_watchdog_reports_unhealthy_once(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    client = Recording()
    watchdog = Watchdog(
        p,
        layout,
        client,
        "i-0abc",
        HealthJudge(p, started=0.0, grace_seconds=0),
        lifecycle_state=lambda: "InService",
        restarts=lambda: 0,
        stop=lambda: None,
    )
    assert watchdog.step(time.time())  # no heartbeat at all: unhealthy
    assert watchdog.step(time.time())
    assert client.calls == [
        (
            "set_instance_health",
            {"InstanceId": "i-0abc", "HealthStatus": "Unhealthy", "ShouldRespectGracePeriod": False},
        )
    ]


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

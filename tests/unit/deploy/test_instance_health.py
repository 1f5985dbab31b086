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

from consumer.telemetry.health import HeartbeatFile
from deploy.bootstrap import boot
from deploy.health import (
    Heartbeat,
    fresh_workers,
    read_heartbeat,
    wait_for_healthy,
)
from deploy.plan import BootPlan, Layout
from deploy.units import unit_files
from ground.clock import FakeClock
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
    from ground.settings import WorkerSettings

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
    # Each round says it began (None), then how it ended.
    assert seen[:2] == [(None, None), (True, None)]
    assert seen[-2] == (None, None)
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

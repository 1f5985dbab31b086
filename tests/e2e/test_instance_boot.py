"""The instance's own start-up code, run on this machine: ``deploy/bootstrap.py`` under a temporary root.

What is real here, as on an instance:

* the asset: staged by ``infra.asset`` from a copy of the repository for the environment ``boot``
  (its generated configuration, the lock's manylinux x86_64 CPython 3.11 wheels, which this machine
  can install, and the product's reproducible wheel), zipped as CDK zips it, unpacked by the
  bootstrap;
* the virtualenv: built by the bootstrap with ``pip --no-index --require-hashes`` from the
  wheelhouse, with every proxy variable pointing at a closed port, so any index access would fail;
* the boot plan: rendered by ``infra.user_data.boot_plan`` from the environment's settings;
* the units: the files the bootstrap wrote; each ``consumer-worker@N`` runs the ``ExecStart=``
  of that file (``%i``/``%H`` substituted) in its ``WorkingDirectory=`` with its ``Environment=``;
* the bootstrap's wait for every worker's heartbeat before it signals SUCCESS.

What this test replaces: systemd (``tests/unit_runner.py`` starts the worker units; the watchdog
unit is written and enabled but not run, it needs the instance metadata service), ``useradd`` and
``chown`` (recorded), the CloudWatch agent (a TCP listener on the port of ``metrics.agent_endpoint``),
the AWS CLI's ``signal-resource`` (recorded), the instance profile's credentials (dummy ones
in the units' base environment), and AWS itself (the emulator: tables, streams, logs).

Every process and port the test starts is stopped in ``finally`` blocks (the runner's, the
emulator's and the listener's context managers), whatever happens.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from deploy.bootstrap import boot
from deploy.plan import WATCHDOG_UNIT, BootPlan, Layout
from emulator.testing import running_emulator
from ground.settings import Settings, load_settings
from infra.asset import staged_asset
from infra.product_wheel import PRODUCT_PACKAGES
from infra.user_data import BootParameters, boot_plan
from tests.e2e.fast_settings import FAST_WORKER_YAML
from tests.e2e.test_metrics_reach_agent import KCL_METRICS, AgentStandIn, metric_total, published_names
from tests.support import free_port
from tests.unit_runner import UnitRunner
from tools.local_aws import create_local_tables

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
WRITES = 10
PROCESSES = 2


class LocalHost:
    """The bootstrap's host on a developer's machine: worker units through the unit runner, the
    rest recorded."""

    def __init__(self, runner: UnitRunner) -> None:
        self.runner = runner
        self.calls: list[tuple[str, ...]] = []
        self.signals: list[tuple[str, str]] = []

    def ensure_user(self, name: str, home: Path) -> None:
        self.calls.append(("ensure_user", name, str(home)))

    def chown(self, path: Path, user: str) -> None:
        self.calls.append(("chown", str(path), user))

    def start_agent(self, config_file: Path) -> None:
        self.calls.append(("start_agent", str(config_file)))

    def enable_and_start(self, units: Sequence[str]) -> None:
        self.calls.append(("enable_and_start", *units))
        for unit in units:
            if unit != WATCHDOG_UNIT:
                self.runner.start(unit)

    def instance_id(self) -> str:
        return "i-0localboot"

    def signal(self, plan: BootPlan, status: str, reason: str) -> None:
        self.signals.append((status, reason))


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return condition()


def write_repository(target: Path, endpoint: str, agent_endpoint: str) -> None:
    """A user's clone: what the asset takes from this repository, plus an environment ``boot``
    pointing at the emulator and sending EMF to the listener."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (*PRODUCT_PACKAGES, "config", "deploy"):
        shutil.copytree(REPO / name, target / name, ignore=ignore)
    for name in ("pyproject.toml", "requirements.txt"):
        shutil.copy(REPO / name, target / name)
    (target / "config" / "boot.yaml").write_text(
        f"""
application_name: boot-test
region: us-east-1
endpoint_url: {endpoint}
table:
  name: orders
  create: true
  partition_key: {{name: pk, type: S}}
  sort_key: {{name: sk, type: S}}
{FAST_WORKER_YAML}
metrics:
  destination: agent
  agent_endpoint: {agent_endpoint}
  flush_interval_seconds: 1
logs:
  retention_days: 1
fleet:
  worker_processes_per_instance: {PROCESSES}
processing:
  processor: changelog
  options:
    destination: var/changelog
"""
    )


def zip_like_cdk(directory: Path, archive: Path) -> Path:
    return Path(shutil.make_archive(str(archive.with_suffix("")), "zip", root_dir=directory))


def unit_environment(home: Path) -> dict[str, str]:
    """What the instance gives a unit besides its own ``Environment=``: a PATH, a home, and the
    instance profile's credentials (dummy ones for the emulator)."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def changelog_lines(directory: Path) -> int:
    count = 0
    for path in directory.rglob("*.jsonl.gz"):
        try:
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                count += sum(1 for line in handle if line.strip())
        except (OSError, EOFError):  # an object still being written
            continue
    return count


def staged_archive(repository: Path, settings: Settings, tmp_path: Path) -> Path:
    return zip_like_cdk(staged_asset(repository, settings, "x86_64"), tmp_path / "asset.zip")


def plan_for(settings: Settings, health_timeout_seconds: int) -> BootPlan:
    return dataclasses.replace(
        boot_plan(
            settings,
            BootParameters(
                asset_url="s3://assets/asset.zip",
                lifecycle_hook_name="boot-test-release-leases",
                stack_name="boot-test",
                signal_resource="FleetGroupASG",
            ),
        ),
        health_timeout_seconds=health_timeout_seconds,
        group_name="boot-test-workers",  # what the user data asks Auto Scaling for on an instance
    )


def test_the_instance_boot_installs_offline_starts_the_units_and_signals_once_workers_are_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository, root = tmp_path / "repo", tmp_path / "root"
    repository.mkdir()
    with (
        running_emulator(partitions=2, rollover_seconds=3600, log_path=tmp_path / "emulator.log") as emu,
        AgentStandIn() as agent,
        UnitRunner(Layout(root).unit_dir, unit_environment(tmp_path), tmp_path / "units") as runner,
    ):
        write_repository(repository, emu.endpoint, agent.endpoint)
        settings = load_settings("boot", repository / "config", environ={})
        create_local_tables(settings, emu.client("dynamodb"))
        archive = staged_archive(repository, settings, tmp_path)
        plan = plan_for(settings, health_timeout_seconds=300)  # generous: two loaded cores
        layout = Layout(root)
        host = LocalHost(runner)
        # Any attempt to reach an index during boot would go through a proxy that is not there.
        dead = f"http://127.0.0.1:{free_port()}"
        with monkeypatch.context() as offline:
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
                offline.setenv(name, dead)
            offline.setenv("NO_PROXY", "")
            offline.setenv("no_proxy", "")
            healthy = boot(plan, layout, archive, host, python=sys.executable)

        assert healthy, runner.logs()
        assert host.signals[0][0] == "SUCCESS" and len(host.signals) == 1, host.signals
        assert ("enable_and_start", "consumer-worker@1", "consumer-worker@2", WATCHDOG_UNIT) in host.calls
        assert ("start_agent", str(layout.agent_config_file)) in host.calls
        # The agent's configuration is the plan's: it listens where the workers send.
        assert str(agent.endpoint.rsplit(":", 1)[1]) in layout.agent_config_file.read_text()
        # The product runs from the virtualenv's own install (the wheel), not from the source tree.
        located = subprocess.run(
            [str(layout.venv_dir / "bin" / "python"), "-c", "import consumer, sys; print(consumer.__file__)"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        assert str(layout.venv_dir) in located
        # The heartbeat files the bootstrap waited on are the units' own (ExecStart's %i).
        assert sorted(p.name for p in layout.health_dir.iterdir() if not p.name.startswith(".")) == [
            "worker-1",
            "worker-2",
        ]

        ddb = emu.client("dynamodb")
        for n in range(WRITES):
            ddb.put_item(TableName=settings.table.name, Item={"pk": {"S": f"k{n}"}, "sk": {"S": "v"}})
        changelog = layout.source_dir / "var" / "changelog"
        assert wait_until(lambda: changelog_lines(changelog) >= WRITES, 180), runner.logs()
        assert wait_until(lambda: metric_total(agent.documents(), "RecordsProcessed") >= WRITES, 120), (
            runner.logs()
        )
        codes = runner.stop_all()
        assert set(codes.values()) == {0}, (codes, runner.logs())
        documents = agent.documents()

    assert changelog_lines(changelog) == WRITES
    assert metric_total(documents, "RecordsProcessed") == WRITES
    for document in documents:
        assert document["_aws"]["LogGroupName"] == settings.metrics_log_group
    names = set().union(*(published_names(d) for d in documents))
    assert names >= KCL_METRICS, sorted(names)
    # Both units ran (each started a worker that reported).
    workers = {d["WorkerIdentifier"].split("@", 1)[0] for d in documents}
    assert {w.rsplit("-", 1)[1] for w in workers} == {"1", "2"}, workers


def test_workers_that_never_report_healthy_make_the_boot_signal_failure(tmp_path: Path) -> None:
    """The half-working instance of old: installed, units started, workers exiting at once (here:
    nothing answers at their endpoint). No heartbeat, so the bootstrap signals FAILURE, which fails
    the stack's creation or rolling update instead of leaving the instance InService."""
    repository, root = tmp_path / "repo", tmp_path / "root"
    repository.mkdir()
    nowhere = f"http://127.0.0.1:{free_port()}"
    with UnitRunner(Layout(root).unit_dir, unit_environment(tmp_path), tmp_path / "units") as runner:
        write_repository(repository, nowhere, f"tcp://127.0.0.1:{free_port()}")
        settings = load_settings("boot", repository / "config", environ={})
        host = LocalHost(runner)
        healthy = boot(
            plan_for(settings, health_timeout_seconds=10),
            Layout(root),
            staged_archive(repository, settings, tmp_path),
            host,
            python=sys.executable,
        )
        assert not healthy
        assert [status for status, _ in host.signals] == ["FAILURE"], host.signals
        assert "not healthy" in host.signals[0][1]
        # The units did start (and exited): the failure is the workers', not the install's.
        assert len(runner.started) == PROCESSES
        assert wait_until(lambda: all(s.process.poll() is not None for s in runner.started.values()), 60)
        assert all(s.process.returncode != 0 for s in runner.started.values()), runner.logs()
        assert not list(Layout(root).health_dir.glob("worker-*"))

"""What a boot that fails at each of its steps leaves behind, found by running the real boot code.

The instance's boot is two programs: the user data (``infra.user_data.boot_script``, bash) and the
bootstrap it hands over to (``deploy/bootstrap.py``). For each step that can fail the model needs
what the two did about it: which CloudFormation signals were sent, whether the instance marked
itself Unhealthy or powered off, which systemd units were started (so whether a watchdog runs), and
the exit status. Rather than restate the scripts, :func:`outcomes` runs them once per process:

* the bootstrap's ``main`` under a temporary root with a recording host (in place of
  ``SystemdHost``), a real archive and a stand-in interpreter for the virtualenv, made to fail at
  one step at a time (a broken archive, ``venv`` failing, the configuration unwritable, ``useradd``,
  the agent, ``systemctl``, workers that never report), its exit status as it maps it;
* the user data under bash with stub commands on ``PATH`` (as tests/infra/test_boot_policy.py
  does), failing at the instance metadata, the packages, the download or the group's name, or
  running a bootstrap that exits with the status found above.

The paths the user data writes (``/opt/consumer``, ``/etc/consumer-boot.json``) are moved under a
temporary directory; nothing else of the script is changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USER_DATA_STEPS = ("metadata", "packages", "download", "group-name")
BOOTSTRAP_STEPS = ("unpack", "venv", "configuration", "user", "agent", "units", "workers")
STEPS = USER_DATA_STEPS + BOOTSTRAP_STEPS


@dataclass(frozen=True)
class BootOutcome:
    step: str | None  # the step that failed; None for a boot that went through
    signals: tuple[str, ...]  # CloudFormation signals sent, in order
    unhealthy: bool  # the instance marked itself Unhealthy
    units: tuple[str, ...]  # systemd units started
    status: int  # the user data's exit status
    powered_off: bool = False  # it shut itself down (not running: EC2's health check replaces it)

    @property
    def watchdog(self) -> bool:
        return any(unit.startswith("consumer-watchdog") for unit in self.units)

    @property
    def workers(self) -> bool:
        return any(unit.startswith("consumer-worker") for unit in self.units)


@dataclass
class RecordingHost:
    """deploy.host.Host that records; ``fail`` names the call that raises. A call the protocol does
    not name (a host method added later) is recorded too."""

    fail: str | None = None
    write_beats: Callable[[Sequence[str]], None] | None = None
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def _do(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if name == self.fail:
            raise subprocess.CalledProcessError(1, [name])

    def ensure_user(self, name: str, home: Path) -> None:
        self._do("ensure_user", name, home)

    def chown(self, path: Path, user: str) -> None:
        self._do("chown", path, user)

    def start_agent(self, config_file: Path) -> None:
        self._do("start_agent", config_file)

    def enable_and_start(self, units: Sequence[str]) -> None:
        self._do("enable_and_start", tuple(units))
        if self.write_beats is not None:
            self.write_beats(units)

    def instance_id(self) -> str:
        return "i-0sim"

    def signal(self, plan: Any, status: str, reason: str) -> None:
        self._do("signal", status)

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._do(name, *args)


_FAILING_AT = {"user": "ensure_user", "agent": "start_agent", "units": "enable_and_start"}


def _bootstrap(plan: Any, step: str | None, root: Path) -> tuple[int, RecordingHost]:
    """``deploy.bootstrap.main`` failing at ``step`` (its host recorded, its virtualenv's interpreter a
    stand-in); (its exit status, the host's record)."""
    from consumer.telemetry.health import HeartbeatFile
    from deploy import bootstrap
    from deploy.plan import Layout

    layout = Layout(root / "root")
    archive = root / "asset.zip"
    if step == "unpack":
        archive.write_bytes(b"not a zip")
    else:
        with zipfile.ZipFile(archive, "w") as bundle:
            bundle.writestr("config/base.yaml", "application_name: sim\n")
    python = root / "python"
    venv_ok = (
        "exit 1"
        if step == "venv"
        else 'mkdir -p "$4/bin" && printf "#!/bin/sh\\nexit 0\\n" > "$4/bin/python" && chmod +x "$4/bin/python"'
    )
    python.write_text(f"#!/bin/sh\n{venv_ok}\n")
    python.chmod(0o755)
    if step == "configuration":
        layout.health_dir.parent.mkdir(parents=True, exist_ok=True)
        layout.health_dir.write_text("a file where the directory goes")

    def beats(units: Sequence[str]) -> None:
        for unit in units:
            if step != "workers" and unit.startswith("consumer-worker@"):
                HeartbeatFile(layout.heartbeat(unit.split("@", 1)[1])).record(True)

    host = RecordingHost(fail=_FAILING_AT.get(step or ""), write_beats=beats)
    if step == "workers":
        plan = dataclasses.replace(plan, health_timeout_seconds=0)
    plan_file = root / "plan.json"
    plan_file.write_text(plan.to_json())
    build_venv = bootstrap.build_venv
    seams = {
        "SystemdHost": lambda: host,  # the instance's own tools: recorded instead
        "build_venv": lambda layout, _python: build_venv(layout, str(python)),  # the stand-in interpreter
    }
    real = {name: getattr(bootstrap, name) for name in seams}
    said = io.StringIO()  # the boot log (cloud-init's output on an instance)
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        for name, seam in seams.items():
            setattr(bootstrap, name, seam)
        try:
            argv = ["--archive", str(archive), "--plan", str(plan_file), "--root", str(layout.root)]
            status = bootstrap.main(argv)
        finally:
            for name, function in real.items():
                setattr(bootstrap, name, function)
    return status, host


def _user_data(script: str, step: str | None, bootstrap_status: int, root: Path) -> tuple[int, list[str]]:
    """The user data under bash, failing at ``step`` or running a bootstrap exiting so."""
    stubs = root / "bin"
    stubs.mkdir()
    calls = root / "calls"
    calls.touch()
    curl = (
        "exit 22" if step == "metadata" else 'case "$*" in *api/token*) echo token ;; *) echo i-0sim ;; esac'
    )
    describe = "None" if step == "group-name" else "sim-stack-FleetGroup-1A2B"
    aws = (
        f'echo "aws $*" >> {calls}; case "$*" in '
        f"*describe-auto-scaling-instances*) echo {describe} ;; "
        f'*"s3 cp"*) {"exit 1" if step == "download" else "true"} ;; esac'
    )
    commands = {
        "curl": curl,
        "rpm": "exit 1",
        "dnf": "exit 1" if step == "packages" else "true",
        "aws": aws,
        "python3.11": f'echo "python3.11 $*" >> {calls}; exit {bootstrap_status}',
        "shutdown": f'echo "shutdown $*" >> {calls}',
    }
    for name, body in commands.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    path = root / "user-data.sh"
    path.write_text(script)
    ran = subprocess.run(
        ["bash", str(path)],
        env={"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return ran.returncode, calls.read_text().splitlines()


def user_data_script(settings: Any, plan: Any, root: Path) -> str:
    """The environment's user data, its two absolute paths moved under ``root``."""
    from infra import user_data

    script = "\n".join(
        user_data.boot_script(
            settings,
            user_data.BootParameters(
                asset_url="s3://cdk-assets/asset.zip",
                lifecycle_hook_name=plan.lifecycle_hook_name,
                stack_name=plan.stack_name,
                signal_resource=plan.signal_resource,
            ),
        )
    )
    script = script.replace(user_data.PLAN_SOURCE, str(root / "consumer-boot.json"))
    return script.replace(user_data.INSTALL_ROOT, str(root / "opt-consumer")) + "\n"


def outcomes(settings: Any, plan: Any) -> dict[str | None, BootOutcome]:
    found: dict[str | None, BootOutcome] = {}
    with tempfile.TemporaryDirectory() as temporary:
        base = Path(temporary)
        for index, step in enumerate((None, *STEPS)):
            root = base / f"boot-{index}"
            root.mkdir()
            units: tuple[str, ...] = ()
            signals: list[str] = []
            health = False
            status = 0
            if step not in USER_DATA_STEPS:
                status, host = _bootstrap(plan, step, root)
                for name, args in host.calls:
                    if name == "signal":
                        signals.append(str(args[0]))
                    elif name == "enable_and_start" and name != host.fail:
                        units = tuple(args[0])
                    elif "health" in name:
                        health = True
            script = user_data_script(settings, plan, root)
            exit_status, calls = _user_data(script, step, status, root)
            for call in calls:
                if "signal-resource" in call:
                    signals.append(call.split("--status ", 1)[1].split()[0])
                if "set-instance-health" in call and "Unhealthy" in call:
                    health = True
            off = any(call.startswith("shutdown") for call in calls)
            found[step] = BootOutcome(step, tuple(signals), health, units, exit_status, off)
    return found


def describe(table: dict[str | None, BootOutcome]) -> str:
    return json.dumps({str(k): dataclasses.asdict(v) for k, v in table.items()}, indent=1)


if __name__ == "__main__":
    from simulation.fleet_ops.templates import load, settings_of

    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    print(describe(outcomes(settings_of("prod"), load("prod").plan)))

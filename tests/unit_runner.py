"""A stand-in for the little of systemd the instance's units use, to run them on a developer's machine.

It reads the unit file the bootstrap wrote, takes ``WorkingDirectory=``, every ``Environment=``
and ``ExecStart=`` from its ``[Service]`` section, substitutes the specifiers the units use (``%i``
the instance number, ``%H`` the host name, ``%%``) and starts that command as a subprocess in its
own process group. What it does not do, and the instance's systemd does: run as ``User=``, restart
on failure (``Restart=``), order units, enforce ``TimeoutStopSec=`` (here: SIGTERM, then SIGKILL
after a fixed grace). Every process it started is stopped when the runner's block ends, whatever
happened in it.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType


@dataclass(frozen=True)
class ServiceSpec:
    working_directory: Path | None
    environment: dict[str, str]
    command: list[str]


def substitute(text: str, instance: str, host: str) -> str:
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char == "%" and index + 1 < len(text):
            specifier = text[index + 1]
            out.append({"i": instance, "H": host, "%": "%"}.get(specifier, char + specifier))
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def parse_service(unit_text: str, instance: str, host: str) -> ServiceSpec:
    """The ``[Service]`` keys the instance's units use, specifiers substituted."""
    section = ""
    working: Path | None = None
    environment: dict[str, str] = {}
    command: list[str] = []
    for raw in unit_text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section != "Service" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = substitute(value, instance, host)
        if key == "WorkingDirectory":
            working = Path(value)
        elif key == "Environment":
            for assignment in shlex.split(value):
                name, _, setting = assignment.partition("=")
                environment[name] = setting
        elif key == "ExecStart":
            command = shlex.split(value)
    if not command:
        raise ValueError("the unit has no ExecStart=")
    return ServiceSpec(working, environment, command)


@dataclass
class Started:
    unit: str
    process: subprocess.Popen[bytes]
    log_path: Path


class UnitRunner:
    """Starts ``name@instance`` units from ``unit_dir`` (template ``name@.service``) or ``name``
    units (``name.service``) on top of ``base_environment`` (what the instance's profile and the
    machine provide); their output goes to ``log_dir/<unit>.log``."""

    def __init__(self, unit_dir: Path, base_environment: dict[str, str], log_dir: Path) -> None:
        self.unit_dir = unit_dir
        self.base_environment = base_environment
        self.log_dir = log_dir
        self.started: dict[str, Started] = {}

    def spec(self, unit: str) -> ServiceSpec:
        name, _, instance = unit.partition("@")
        file = self.unit_dir / (f"{name}@.service" if instance else f"{unit}.service")
        return parse_service(file.read_text(), instance, socket.gethostname())

    def start(self, unit: str) -> Started:
        spec = self.spec(unit)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{unit}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                spec.command,
                cwd=spec.working_directory,
                env={**self.base_environment, **spec.environment},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started[unit] = Started(unit, process, log_path)
        return self.started[unit]

    def stop_all(self, grace_seconds: float = 30.0) -> dict[str, int | None]:
        """SIGTERM every unit's process group (as ``KillSignal=SIGTERM``), SIGKILL what lingers."""
        for started in self.started.values():
            if started.process.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(started.process.pid, signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for unit, started in self.started.items():
            try:
                codes[unit] = started.process.wait(timeout=grace_seconds)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(started.process.pid, signal.SIGKILL)
                started.process.wait(timeout=grace_seconds)
                codes[unit] = None
        return codes

    def logs(self) -> str:
        return "\n".join(
            f"--- {unit}\n{s.log_path.read_text(errors='replace')[-2500:]}"
            for unit, s in self.started.items()
        )

    def __enter__(self) -> UnitRunner:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_all()

"""Start an emulator process for a test and always take it down again.

``running_emulator(**overrides)`` is the stable entry point other test suites (end-to-end, demo)
use: it starts ``python -m emulator`` in its own process group on a free loopback port, waits for
its ready line, yields a :class:`RunningEmulator`, and on exit terminates the whole group, even
when the test failed or the process never became ready.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.control import EmulatorControl
from emulator.errors import StartupError
from emulator.server import READY_PREFIX, STARTUP_FLAGS

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class RunningEmulator:
    endpoint: str
    pid: int
    log_path: Path
    region: str = "us-east-1"

    @property
    def control(self) -> EmulatorControl:
        return EmulatorControl(self.endpoint)

    def client(self, service: str, **kwargs: Any) -> Any:
        """A plain boto3 client pointed at the emulator (dummy credentials)."""
        import boto3

        kwargs.setdefault("region_name", self.region)
        kwargs.setdefault("aws_access_key_id", "local")
        kwargs.setdefault("aws_secret_access_key", "local")
        return boto3.client(service, endpoint_url=self.endpoint, **kwargs)


def emulator_command(env: str, config_dir: str | Path | None, overrides: dict[str, Any]) -> list[str]:
    unknown = sorted(set(overrides) - STARTUP_FLAGS)
    if unknown:
        raise StartupError(f"unknown emulator override(s) {unknown}; allowed: {sorted(STARTUP_FLAGS)}")
    command = [sys.executable, "-m", "emulator", "--env", env, "--quiet"]
    if config_dir is not None:
        command += ["--config-dir", str(config_dir)]
    for name, value in overrides.items():
        if value is not None:
            command += ["--" + name.replace("_", "-"), str(value)]
    return command


def wait_until_ready(process: subprocess.Popen[bytes], timeout: float, log_path: Path) -> str:
    """Read the ready line from the child's stdout; the endpoint it names."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buffer = b""
    try:
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            buffer += chunk
            # Only whole lines count: a line without its newline may still be arriving.
            complete, _, _ = buffer.rpartition(b"\n")
            for line in complete.decode(errors="replace").splitlines():
                if line.startswith(READY_PREFIX):
                    return line[len(READY_PREFIX) :].strip()
    finally:
        selector.close()
    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    raise StartupError(f"the emulator did not become ready within {timeout:g} s; its log ends:\n{tail}")


def stop(process: subprocess.Popen[bytes], grace_seconds: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it if it lingers; never leaves a child behind."""
    if process.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=grace_seconds)
    if process.stdout is not None:
        process.stdout.close()


@contextmanager
def running_emulator(
    *,
    env: str = "local",
    config_dir: str | Path | None = None,
    startup_timeout: float = 30.0,
    log_path: str | Path | None = None,
    **overrides: Any,
) -> Iterator[RunningEmulator]:
    """An emulator on a free port (``port=0`` unless overridden) for the duration of the block.

    ``overrides`` are emulator settings by name, e.g. ``partitions=2, rollover_seconds=3600,
    error_rate=0.1, seed=11``, and table faults to start with, e.g. ``table_stale_scan_millis=500,
    table_fault_tables="app*"`` (see ``python -m emulator --help``).
    """
    overrides.setdefault("port", 0)
    if config_dir is None and (PROJECT_ROOT / "config").is_dir():
        config_dir = PROJECT_ROOT / "config"
    command = [*emulator_command(env, config_dir, overrides), "--exit-with-parent"]
    ours = log_path is None  # a log of our own making goes when the emulator does
    if log_path is None:
        handle, name = tempfile.mkstemp(prefix="emulator-", suffix=".log")
        os.close(handle)
        log_path = name
    log = Path(log_path)
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log_file, start_new_session=True, cwd=PROJECT_ROOT
        )
    try:
        endpoint = wait_until_ready(process, startup_timeout, log)
        yield RunningEmulator(endpoint=endpoint, pid=process.pid, log_path=log)
    finally:
        stop(process)
        if ours:
            log.unlink(missing_ok=True)

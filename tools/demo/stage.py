"""What the demo stands on before any worker starts: the local AWS emulator on its port, the source
table and its stream, the snapshot's bootstrap, clean work directories.

Each is started, or refused with a :class:`DemoError` that says what to do (a port taken names the
program that may hold it and another port to use); :func:`stop_process` stops what was started.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from emulator.errors import StartupError
from emulator.testing import emulator_command, wait_until_ready
from emulator.testing import stop as stop_emulator
from ground.settings import Settings
from tools.demo.load import prefill


class DemoError(Exception):
    """The demo could not run (a port in use, a process that would not start)."""


def _port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1].split("/", 1)[0])


def start_local_aws(env: str, config_dir: Path, endpoint: str, log_path: Path) -> subprocess.Popen[bytes]:
    """The emulator (moto + the multi-shard stream engine) on ``endpoint``'s port, settings from
    ``config/<env>.yaml``'s ``emulator`` section; it exits by itself if this process dies."""
    port = _port_of(endpoint)
    if not _free(port):
        raise DemoError(
            f"port {port} (endpoint_url of env {env}) is taken by another program, perhaps another demo "
            f"or `consumer local up --env {env}`: stop it, or give the demo another port: "
            f"CONSUMER_ENDPOINT_URL=http://127.0.0.1:{_free_port()} make demo"
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [*emulator_command(env, config_dir, {"port": port}), "--exit-with-parent"]
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        wait_until_ready(server, 30.0, log_path)
    except StartupError as exc:
        stop_process(server)
        first = str(exc).splitlines()[0]
        raise DemoError(
            f"the local AWS emulator did not start on port {port}: {first} (its log: {log_path})"
        ) from exc
    return server


def _free(port: int) -> bool:
    """Nothing listens on ``port``. Connections a previous demo's emulator closed linger in TIME_WAIT
    for a minute; the emulator binds past them (SO_REUSEADDR, as every HTTP server does), so the
    probe does too: it still fails while any program listens there."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes]) -> None:
    stop_emulator(process)


def create_source_table(ddb: Any, settings: Settings, prefilled: int = 0) -> int:
    """The table, ``prefilled`` items written while it has no stream (as in a table older than the
    stream's 24 h), then its stream. Returns the items written before the stream."""
    table = settings.table
    keys = [(table.partition_key, "HASH")] + ([(table.sort_key, "RANGE")] if table.sort_key else [])
    ddb.create_table(
        TableName=table.name,
        KeySchema=[{"AttributeName": k.name, "KeyType": kind} for k, kind in keys],
        AttributeDefinitions=[{"AttributeName": k.name, "AttributeType": k.type} for k, _ in keys],
        BillingMode="PAY_PER_REQUEST",
    )
    written = prefill(ddb, table, prefilled) if prefilled else 0
    ddb.update_table(
        TableName=table.name,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": table.stream_view_type},
    )
    return written


def bootstrap_snapshot(env: str, config_dir: Path, log_path: Path) -> str:
    """``consumer pipeline bootstrap``: the snapshot's base from a parallel scan of the table, taken
    before the load starts (so every change after it is in the change log). Returns its last line."""
    command = [sys.executable, "-m", "tools.cli", "pipeline", "bootstrap", "--env", env]
    run = subprocess.run(
        [*command, "--config-dir", str(config_dir)], capture_output=True, text=True, timeout=600, check=False
    )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(run.stdout + run.stderr, encoding="utf-8")
    if run.returncode != 0:
        raise DemoError(f"consumer pipeline bootstrap failed (exit {run.returncode}; see {log_path})")
    lines = [line for line in run.stdout.splitlines() if line.startswith("[bootstrap]")]
    return lines[-1] if lines else run.stdout.strip().splitlines()[-1]


def prepare_workdir(workdir: Path, changelog: Path) -> None:
    for path in (workdir, changelog):
        if path.exists():
            shutil.rmtree(path)
    workdir.mkdir(parents=True)

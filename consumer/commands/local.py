"""``consumer local up|down|status``: the local AWS emulator as a background process.

``up`` starts ``python -m emulator`` in its own session, waits for its ready line and records its
pid and endpoint in ``var/emulator.json``; ``down`` terminates that process group (SIGTERM, then
SIGKILL) and removes the file, so nothing is left running; ``status`` says whether it answers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from consumer.commands import add_env_arguments

STATE_FILE = Path("var/emulator.json")
LOG_FILE = Path("var/emulator.log")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "local", help="start/stop the local AWS emulator (DynamoDB + multi-shard Streams)"
    )
    actions = parser.add_subparsers(dest="local_action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start the emulator in the background")
    add_env_arguments(up)
    up.add_argument("--port", type=int, default=None, help="port (default: emulator.port; 0 picks one)")
    up.add_argument("--seed", type=int, default=None, help="seed (default: emulator.seed)")
    up.add_argument("--partitions", type=int, default=None, help="partitions per stream-enabled table")
    up.add_argument("--rollover-seconds", type=float, default=None, help="shard rollover period")
    up.add_argument("--split-every-seconds", type=float, default=None, help="split a partition this often")
    up.add_argument(
        "--error-rate", type=float, default=None, help="share of stream calls answered with HTTP 500"
    )
    up.set_defaults(handler=_up)
    down = actions.add_parser("down", help="stop the emulator started by `local up`")
    down.set_defaults(handler=_down)
    status = actions.add_parser("status", help="is the emulator running, and where")
    status.set_defaults(handler=_status)


def _read_state() -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return None
    return state


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _up(args: argparse.Namespace) -> int:
    from emulator.errors import StartupError
    from emulator.testing import emulator_command, wait_until_ready

    state = _read_state()
    if state and _alive(int(state["pid"])):
        print(f"the emulator is already running at {state['endpoint']} (pid {state['pid']})")
        return 0
    overrides = {
        name: getattr(args, name)
        for name in ("port", "seed", "partitions", "rollover_seconds", "split_every_seconds", "error_rate")
        if getattr(args, name) is not None
    }
    command = emulator_command(args.env, args.config_dir, overrides)
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOG_FILE.open("ab") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        endpoint = wait_until_ready(process, 30.0, LOG_FILE)
    except StartupError as exc:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    assert process.stdout is not None
    process.stdout.close()
    STATE_FILE.write_text(json.dumps({"pid": process.pid, "endpoint": endpoint}))
    print(f"emulator running at {endpoint} (pid {process.pid}, log {LOG_FILE})")
    print("point the AWS CLI at it:")
    print(f"  aws --endpoint-url {endpoint} dynamodbstreams list-streams")
    print("  (any credentials work: export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local)")
    print("and boto3:")
    print(f'  boto3.client("dynamodbstreams", endpoint_url="{endpoint}", region_name="us-east-1")')
    print(f"control API: {endpoint}/_emulator/counters, POST /_emulator/rollover|split|trim|faults")
    return 0


def _down(_args: argparse.Namespace) -> int:
    state = _read_state()
    if state is None:
        print("the emulator is not running (no var/emulator.json)")
        return 0
    pid = int(state["pid"])
    if _alive(pid):
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.05)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
    STATE_FILE.unlink(missing_ok=True)
    print(f"emulator stopped (pid {pid})")
    return 0


def _reap(pid: int) -> None:
    """Collect the exit status when this process is the parent (tests); harmless otherwise."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _status(_args: argparse.Namespace) -> int:
    from emulator.control import EmulatorControl

    state = _read_state()
    if state is None or not _alive(int(state["pid"])):
        print("the emulator is not running")
        return 3
    answering = EmulatorControl(state["endpoint"], timeout=2).health()
    print(
        f"emulator pid {state['pid']} at {state['endpoint']}: {'answering' if answering else 'NOT answering'}"
    )
    return 0 if answering else 1

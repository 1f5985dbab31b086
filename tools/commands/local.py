"""``consumer local up|write|down|status``: the local AWS emulator as a background process.

``up`` starts ``python -m emulator`` in its own session, waits for its ready line, records its
pid and endpoint in ``var/emulator.json`` and creates the tables the environment's configuration
names (the source table with its key schema and stream; a replica table for ``dynamodb_replica``),
so ``consumer run --env X`` finds everything it expects. ``write`` puts a few sample items into the
source table. ``down`` terminates the process group (SIGTERM, then SIGKILL) and removes the file, so
nothing is left running; ``status`` says whether it answers. None of them needs AWS credentials.
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

from ground.settings import Settings
from tools.commands import add_env_arguments, settings_from

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
    write = actions.add_parser("write", help="put sample items into the environment's source table")
    add_env_arguments(write)
    write.add_argument("--count", type=int, default=5, help="how many items (default 5)")
    write.add_argument("--first", type=int, default=1, help="number of the first item (default 1)")
    write.set_defaults(handler=_write)
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

    settings = settings_from(args)
    state = _read_state()
    if state and _alive(int(state["pid"])):
        print(f"the emulator is already running at {state['endpoint']} (pid {state['pid']})")
        return _create_tables(settings, str(state["endpoint"]))
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
    finally:
        # The emulator writes its ready line in one write and then lets go of stdout, so closing
        # this end cannot take it down (it did, when the newline came in a second write).
        assert process.stdout is not None
        process.stdout.close()
    STATE_FILE.write_text(json.dumps({"pid": process.pid, "endpoint": endpoint}))
    print(f"emulator running at {endpoint} (pid {process.pid}, log {LOG_FILE})")
    code = _create_tables(settings, endpoint)
    print("point the AWS CLI at it:")
    print(f"  aws --endpoint-url {endpoint} dynamodbstreams list-streams")
    print("  (any credentials work: export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local)")
    print("and boto3:")
    print(f'  boto3.client("dynamodbstreams", endpoint_url="{endpoint}", region_name="{settings.region}")')
    print(f"control API: {endpoint}/_emulator/counters, POST /_emulator/rollover|split|trim|faults")
    return code


def _dynamodb(settings: Settings, endpoint: str) -> Any:
    import boto3

    return boto3.session.Session(region_name=settings.region).client("dynamodb", endpoint_url=endpoint)


def _create_tables(settings: Settings, endpoint: str) -> int:
    """Create what config/<env>.yaml names, so that `consumer run` finds it; say what was done."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tools.local_aws import create_local_tables

    try:
        for line in create_local_tables(settings, _dynamodb(settings, endpoint)):
            print(line)
    except (BotoCoreError, ClientError, TimeoutError) as exc:
        print(f"error: cannot create the tables of env {settings.env} at {endpoint}: {exc}", file=sys.stderr)
        return 1
    if settings.endpoint_url != endpoint:
        print(
            f"note: config/{settings.env}.yaml has endpoint_url {settings.endpoint_url}, which "
            f"`consumer run --env {settings.env}` uses; this emulator is at {endpoint}"
        )
    return 0


def _write(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from tools.commands import CommandError
    from tools.local_aws import endpoint_answers, is_local_endpoint, write_sample_items

    settings = settings_from(args)
    endpoint = settings.endpoint_url
    if not is_local_endpoint(endpoint) or endpoint is None:
        raise CommandError(
            f"env {settings.env} has no local endpoint_url: `consumer local write` only writes to the emulator"
        )
    if not endpoint_answers(endpoint):
        raise CommandError(
            f"nothing answers at {endpoint} (endpoint_url of env {settings.env}): "
            f"start the emulator: `consumer local up --env {settings.env}`"
        )
    if args.count < 1:
        raise CommandError("--count must be at least 1")
    try:
        items = write_sample_items(settings, _dynamodb(settings, endpoint), args.count, args.first)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            raise CommandError(
                f"table {settings.table.name} does not exist at {endpoint}: create it: "
                f"`consumer local up --env {settings.env}`"
            ) from exc
        raise CommandError(f"cannot write to {settings.table.name}: {exc}") from exc
    except BotoCoreError as exc:
        raise CommandError(f"cannot write to {settings.table.name}: {exc}") from exc
    key = settings.table.partition_key.name
    names = [str(next(iter(item[key].values()))) for item in items]
    print(f"wrote {len(items)} items to {settings.table.name}: {key} {names[0]} .. {names[-1]}")
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

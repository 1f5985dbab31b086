"""``consumer local up|write|down|status``: the local AWS emulator as a background process.

``up`` starts ``python -m emulator`` in its own session, waits for its ready line, records its
pid and endpoint in ``var/emulator-<env>.json`` and creates the tables the environment's
configuration names (the source table with its key schema and stream; a replica table for
``dynamodb_replica``), so ``consumer run --env X`` finds everything it expects. Each environment
has its own emulator (its own port, from ``emulator.port``): two environments never share tables,
leases or output. ``write`` puts a few sample items into the source table and waits until a worker
has processed them. ``down`` terminates the process group (SIGTERM, then SIGKILL) and removes the
file, so nothing is left running; ``status`` says whether each answers. None of them needs AWS
credentials.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ground.settings import Settings
from tools.commands import (
    CommandError,
    ExitCode,
    add_command,
    add_env_arguments,
    require_local_endpoint_up,
    settings_from,
)
from tools.local_aws import EmulatorState, another_environments_emulator, read_states, state_path, write_state

LOG_DIR = Path("var")
DEFAULT_WAIT_SECONDS = 60.0


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "local",
        "start/stop the local AWS emulator (DynamoDB + multi-shard Streams)",
        "The local AWS emulator (DynamoDB, multi-shard DynamoDB Streams, S3, CloudWatch Logs) as a "
        "background process, one per environment: start it with the environment's tables, write "
        "sample items, see whether it runs, stop it. No AWS account or credentials needed.",
    )
    actions = parser.add_subparsers(dest="local_action", metavar="ACTION", required=True)
    up = add_command(
        actions,
        "up",
        "start the environment's emulator in the background and create its tables",
        "Start the emulator of env X on its port (emulator.port, which endpoint_url names) in the "
        "background, and create the tables config/X.yaml names: the source table with its key "
        "schema and stream (and the replica table of dynamodb_replica).",
    )
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
    write = add_command(
        actions,
        "write",
        "put sample items into the source table; wait until a worker processed them",
        "Put sample items into the environment's source table on its emulator, then wait (up to "
        "--wait seconds) until a worker of the environment has checkpointed every shard past its "
        "last record: when it returns, the processor has handled them.",
    )
    add_env_arguments(write)
    write.add_argument("--count", type=int, default=5, help="how many items (default 5)")
    write.add_argument("--first", type=int, default=1, help="number of the first item (default 1)")
    write.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"wait this long for a worker to process them (default {DEFAULT_WAIT_SECONDS:g}; 0: do not wait)",
    )
    write.set_defaults(handler=_write)
    down = add_command(
        actions,
        "down",
        "stop the emulators `local up` started here (or one: --env)",
        "Stop the emulator `consumer local up --env X` started from this directory, or without --env "
        "every one it started; nothing is left running.",
    )
    down.add_argument("--env", default=None, help="only this environment's emulator (default: all)")
    down.set_defaults(handler=_down)
    status = add_command(
        actions,
        "status",
        "is each emulator `local up` started running, and where",
        "List the emulators `consumer local up` started from this directory, with their endpoint and "
        "whether they answer. Exits 4 when the one asked for (or every one) is not running.",
    )
    status.add_argument("--env", default=None, help="only this environment's emulator (default: all)")
    status.set_defaults(handler=_status)


def _up(args: argparse.Namespace) -> int:
    from emulator.errors import StartupError
    from emulator.testing import emulator_command, wait_until_ready

    settings = settings_from(args)
    mine = state_path(args.env)
    running = next((s for s in read_states() if s.path == mine and s.alive), None)
    if running is not None:
        print(f"the emulator of env {args.env} is already running at {running.endpoint} (pid {running.pid})")
        return _create_tables(settings, running.endpoint)
    other = another_environments_emulator(settings) if args.port is None else None
    if other is not None:
        raise CommandError(
            f"the emulator of env {other.env} runs at {other.endpoint}, env {args.env}'s endpoint_url: stop it "
            f"(`consumer local down --env {other.env}`) or give env {args.env} a port of its own "
            f"(endpoint_url and emulator.port in config/{args.env}.yaml)",
            ExitCode.UNAVAILABLE,
        )
    overrides = {
        name: getattr(args, name)
        for name in ("port", "seed", "partitions", "rollover_seconds", "split_every_seconds", "error_rate")
        if getattr(args, name) is not None
    }
    command = emulator_command(args.env, args.config_dir, overrides)
    log_file = LOG_DIR / f"emulator-{args.env}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        endpoint = wait_until_ready(process, 30.0, log_file)
    except StartupError as exc:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        raise CommandError(
            str(exc).splitlines()[0] + f" (its log: {log_file})", ExitCode.UNAVAILABLE
        ) from None
    finally:
        # The emulator writes its ready line in one write and then lets go of stdout, so closing
        # this end cannot take it down (it did, when the newline came in a second write).
        assert process.stdout is not None
        process.stdout.close()
    write_state(args.env, process.pid, endpoint)
    print(f"emulator of env {args.env} running at {endpoint} (pid {process.pid}, log {log_file})")
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
        raise CommandError(
            f"cannot create the tables of env {settings.env} at {endpoint}: {exc}", ExitCode.UNAVAILABLE
        ) from None
    if settings.endpoint_url != endpoint:
        print(
            f"note: config/{settings.env}.yaml has endpoint_url {settings.endpoint_url}, which "
            f"`consumer run --env {settings.env}` uses; this emulator is at {endpoint}"
        )
    return ExitCode.OK


def _write(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from tools.local_aws import is_local_endpoint, write_sample_items

    settings = settings_from(args)
    endpoint = settings.endpoint_url
    if not is_local_endpoint(endpoint) or endpoint is None:
        raise CommandError(
            f"env {settings.env} has no local endpoint_url: `consumer local write` only writes to the emulator",
            ExitCode.USAGE,
        )
    require_local_endpoint_up(settings)
    if args.count < 1:
        raise CommandError("--count must be at least 1", ExitCode.USAGE)
    from datetime import UTC, datetime

    from emulator.control import EmulatorControl
    from tools.local_aws import records_arrived

    control = EmulatorControl(endpoint, timeout=5)
    table = settings.table.source_table_name
    before = _positions(control, table)
    written_at = datetime.now(UTC).isoformat(timespec="microseconds")
    try:
        items = write_sample_items(
            settings, _dynamodb(settings, endpoint), args.count, args.first, written_at=written_at
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            raise CommandError(
                f"table {settings.table.source_table_name} does not exist at {endpoint}: create it: "
                f"`consumer local up --env {settings.env}`",
                ExitCode.UNAVAILABLE,
            ) from exc
        raise CommandError(f"cannot write to {settings.table.source_table_name}: {exc}") from exc
    except BotoCoreError as exc:
        raise CommandError(f"cannot write to {settings.table.source_table_name}: {exc}") from exc
    key = settings.table.partition_key.name
    names = [str(next(iter(item[key].values()))) for item in items]
    print(f"wrote {len(items)} items to {table}: {key} {names[0]} .. {names[-1]} (written_at {written_at})")
    after = _positions(control, table)
    if before is not None and after is not None and not records_arrived(before, after):
        raise CommandError(
            f"none of the {len(items)} writes reached the stream of {table}: is its stream enabled? "
            f"(`consumer local status --env {settings.env}`)"
        )
    if args.wait > 0:
        _wait_until_processed(settings, endpoint, args.wait)
    return ExitCode.OK


def _positions(control: Any, table: str) -> dict[str, str | None] | None:
    """The stream's shards and their last records, or None where the emulator cannot say (a
    table it does not stream)."""
    from emulator.errors import ControlError
    from tools.local_aws import stream_positions

    try:
        return stream_positions(control.shards(table))
    except ControlError:
        return None


def _wait_until_processed(settings: Settings, endpoint: str, timeout: float) -> None:
    """Poll the emulator's shard table and the leases table until every shard holding records is
    checkpointed past its last one (so the processor has handled them), or ``timeout`` passes."""
    from consumer.api.leases import DynamoDBLeaseStore, LeaseError
    from emulator.control import EmulatorControl
    from emulator.errors import ControlError
    from tools.local_aws import shards_behind

    print(f"waiting up to {timeout:g} s for a worker of env {settings.env} to process them ...", flush=True)
    control = EmulatorControl(endpoint, timeout=5)
    store = DynamoDBLeaseStore(
        _dynamodb(settings, endpoint),
        settings.leases_table_name,
        workers_table_name=settings.workers_table_name,
    )
    started = time.monotonic()
    behind: list[str] = ["(not read yet)"]
    while time.monotonic() - started < timeout:
        try:
            shards = control.shards(settings.table.source_table_name)
            behind = shards_behind(shards, store.scan().leases)
        except (ControlError, LeaseError):  # no leases table yet: no worker has started
            behind = ["(no worker yet)"]
        if not behind:
            print(f"processed: a worker checkpointed them ({time.monotonic() - started:.1f} s)")
            return
        time.sleep(0.25)
    raise CommandError(
        f"not processed within {timeout:g} s (shards behind: {', '.join(behind)}): is a worker "
        f"running? `consumer run --env {settings.env}`"
    )


def _stop(state: EmulatorState) -> None:
    if state.alive:
        os.killpg(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while state.alive and time.monotonic() < deadline:
            _reap(state.pid)
            time.sleep(0.05)
        if state.alive:
            os.killpg(state.pid, signal.SIGKILL)
            _reap(state.pid)
    state.path.unlink(missing_ok=True)


def _chosen(env: str | None) -> list[EmulatorState]:
    states = read_states()
    return states if env is None else [s for s in states if s.path == state_path(env)]


def _label(state: EmulatorState) -> str:
    return f"env {state.env}" if state.env else f"({state.path.name})"


def _down(args: argparse.Namespace) -> int:
    states = _chosen(args.env)
    if not states:
        which = f"env {args.env}'s emulator is" if args.env else "no emulator is"
        print(f"{which} not running (nothing recorded in {LOG_DIR}/ by `consumer local up`)")
        return ExitCode.OK
    for state in states:
        was_alive = state.alive
        _stop(state)
        print(
            f"emulator of {_label(state)} {'stopped' if was_alive else 'was not running'} (pid {state.pid})"
        )
    return ExitCode.OK


def _reap(pid: int) -> None:
    """Collect the exit status when this process is the parent (tests); harmless otherwise."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _status(args: argparse.Namespace) -> int:
    from emulator.control import EmulatorControl

    states = [s for s in _chosen(args.env) if s.alive]
    if not states:
        which = f"env {args.env}'s emulator" if args.env else "no emulator started by `consumer local up`"
        print(f"{which} is not running" if args.env else f"{which} is running")
        return ExitCode.UNAVAILABLE
    answering_all = True
    for state in states:
        answering = EmulatorControl(state.endpoint, timeout=2).health()
        answering_all = answering_all and answering
        print(
            f"emulator of {_label(state)}: pid {state.pid} at {state.endpoint}: "
            f"{'answering' if answering else 'NOT answering'}"
        )
    return ExitCode.OK if answering_all else ExitCode.UNAVAILABLE

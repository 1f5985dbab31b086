"""``consumer run``: one worker process of the fleet (what each systemd unit on an instance runs)."""

from __future__ import annotations

import argparse
import os
import re
import sys
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


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "run",
        "run a worker: take leases, process the stream's shards, checkpoint, until SIGTERM",
        "Run one worker process: check the processor, the table, its stream and the leases table, then "
        "take leases, deliver each shard's records to the processor and checkpoint, until SIGTERM or "
        "Ctrl-C (then it finishes its batches, checkpoints, releases its leases and exits 0). Run one "
        "per core; workers of one environment share the shards.",
    )
    add_env_arguments(parser)
    parser.add_argument("--worker-id", default=None, help="worker id (default: [name@]host:pid:random)")
    parser.add_argument("--worker-name", default=None, help="a readable prefix for the generated worker id")
    parser.add_argument(
        "--heartbeat-file",
        default=None,
        type=Path,
        help="rewrite this file at every lease-taking round, saying whether it succeeded (read by the "
        "instance's boot and watchdog)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=None,
        help="stderr logs as readable lines or JSON objects (default: logs.console_format, which is "
        "text on a terminal and JSON otherwise); CloudWatch always gets JSON",
    )
    parser.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default=None,
        type=str.upper,
        help="the worker's log level (default: logs.level, INFO)",
    )
    parser.set_defaults(handler=_run)


def with_log_options(settings: Settings, log_format: str | None, log_level: str | None) -> Settings:
    """The settings with the command line's log options in place of ``logs.*``."""
    changes: dict[str, str] = {}
    if log_format is not None:
        changes["console_format"] = log_format
    if log_level is not None:
        changes["level"] = log_level
    if not changes:
        return settings
    return settings.model_copy(update={"logs": settings.logs.model_copy(update=changes)})


def _run(args: argparse.Namespace) -> int:
    from consumer.api.leases import LeaseError
    from consumer.api.worker import FatalStreamError, StreamConfigError, WorkerProcess, new_worker_id
    from consumer.processing import ProcessingConfigError

    settings = with_log_options(settings_from(args), args.log_format, args.log_level)
    # Start-up checks run before logging and metrics start, so that a mistake gives one line on
    # stderr, with the next step, instead of being buried under telemetry about an endpoint that is
    # not there (and is not printed a second time as a log line).
    require_local_endpoint_up(settings)
    _check_locations_filled(settings)
    worker_id = args.worker_id or new_worker_id(args.worker_name)
    try:
        process = WorkerProcess.prepare(
            settings,
            worker_id,
            heartbeat_file=args.heartbeat_file,
            warn=lambda message: print(f"warning: {message}", file=sys.stderr),
        )
    except ProcessingConfigError as exc:
        raise CommandError(str(exc), ExitCode.CONFIG) from None
    except StreamConfigError as exc:
        raise CommandError(f"{exc}{_next_step(settings, str(exc))}", ExitCode.UNAVAILABLE) from None
    try:
        process.run()
    except (FatalStreamError, LeaseError) as exc:
        raise CommandError(str(exc), ExitCode.FAILED) from None
    if process.stuck_calls:
        # The leases are released and telemetry is flushed; the interpreter would wait at exit for
        # the threads of calls that never returned (a stalled processor), so the process leaves them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(ExitCode.OK)
    return ExitCode.OK


def _check_locations_filled(settings: Settings) -> None:
    """A location that still names ``{account}`` is not a bucket anybody owns: stop before a batch
    is retried against it forever."""
    from tools.commands import CommandError

    unfilled = settings.unfilled_locations()
    if unfilled:
        raise CommandError(
            f"{', '.join(unfilled)} of env {settings.env} name {{account}}: set account (the 12-digit "
            f"AWS account) in config/{settings.env}.yaml, or CONSUMER_ACCOUNT"
        )


def _next_step(settings: Settings, message: str) -> str:
    """The command that fixes a start-up error on the local emulator, when there is one."""
    if not settings.on_emulator:
        return ""
    said = re.sub(r"^streams\.\d+: ", "", message)  # several streams: the entry is named first
    if said.startswith("table ") and "does not exist" in said:
        return f"; create the tables env {settings.env} names: `consumer local up --env {settings.env}`"
    return ""

"""``consumer run``: one worker process of the fleet (what each systemd unit on an instance runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ground.settings import Settings
from tools.commands import add_env_arguments, settings_from


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run a worker: take leases, process the stream's shards, checkpoint, until SIGTERM"
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
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from consumer.leases.errors import LeaseError
    from consumer.processing.errors import ProcessingConfigError
    from consumer.runtime.process import WorkerProcess
    from consumer.runtime.worker import new_worker_id
    from consumer.streams.errors import FatalStreamError
    from consumer.streams.target import StreamConfigError

    settings = settings_from(args)
    # Start-up checks run before logging and metrics start, so that a mistake gives one line on
    # stderr, with the next step, instead of being buried under telemetry about an endpoint that is
    # not there (and is not printed a second time as a log line).
    _check_local_endpoint(settings)
    _check_locations_filled(settings)
    worker_id = args.worker_id or new_worker_id(args.worker_name)
    try:
        process = WorkerProcess.prepare(
            settings,
            worker_id,
            heartbeat_file=args.heartbeat_file,
            warn=lambda message: print(f"warning: {message}", file=sys.stderr),
        )
    except (ProcessingConfigError, StreamConfigError) as exc:
        print(f"error: {exc}{_next_step(settings, str(exc))}", file=sys.stderr)
        return 2
    try:
        process.run()
    except (FatalStreamError, LeaseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_local_endpoint(settings: Settings) -> None:
    """With a local endpoint that nobody answers on, say how to start the emulator, and stop."""
    from tools.commands import CommandError
    from tools.local_aws import endpoint_answers, is_local_endpoint

    endpoint = settings.endpoint_url
    if endpoint is not None and is_local_endpoint(endpoint) and not endpoint_answers(endpoint):
        raise CommandError(
            f"nothing answers at {endpoint} (endpoint_url of env {settings.env}): "
            f"start the emulator: `consumer local up --env {settings.env}`"
        )


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
    from tools.local_aws import is_local_endpoint

    if not is_local_endpoint(settings.endpoint_url):
        return ""
    if message.startswith("table ") and "does not exist" in message:
        return f"; create the tables env {settings.env} names: `consumer local up --env {settings.env}`"
    return ""

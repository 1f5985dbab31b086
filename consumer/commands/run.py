"""``consumer run``: one worker process of the fleet (what each systemd unit on an instance runs)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from consumer.commands import add_env_arguments, settings_from
from consumer.settings import Settings


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
    from consumer.runtime.clients import AwsClients, processing_clients
    from consumer.runtime.processors import build_processor_factory
    from consumer.runtime.worker import Worker, new_worker_id
    from consumer.streams.errors import FatalStreamError
    from consumer.streams.target import StreamConfigError, resolve_stream_patiently
    from consumer.telemetry.health import HeartbeatFile
    from consumer.telemetry.logs import configure_logging
    from consumer.telemetry.metrics import MetricsRecorder
    from consumer.telemetry.transports import transport_from_settings

    settings = settings_from(args)
    # Start-up checks run before logging and metrics start, so that a mistake gives one line on
    # stderr, with the next step, instead of being buried under telemetry about an endpoint that is
    # not there (and is not printed a second time as a log line).
    _check_local_endpoint(settings)
    worker_id = args.worker_id or new_worker_id(args.worker_name)
    clients = AwsClients.from_settings(settings)
    metrics = MetricsRecorder(settings, worker_id, transport_from_settings(settings, worker_id))
    try:
        # Everything in processing.* is checked here, before the worker takes a single lease.
        factory = build_processor_factory(
            settings, clients=processing_clients(settings, clients), metrics=metrics
        )
        resolve_stream_patiently(
            clients.dynamodb,
            clients.streams,
            settings.table,
            sleep=time.sleep,
            warn=lambda message: print(f"warning: {message}", file=sys.stderr),
        )
    except (ProcessingConfigError, StreamConfigError) as exc:
        print(f"error: {exc}{_next_step(settings, str(exc))}", file=sys.stderr)
        return 2
    logging_handle = configure_logging(settings, worker_id)
    log = logging.getLogger("consumer.worker")
    try:
        worker = Worker(
            settings,
            clients=clients,
            processor_factory=factory,
            worker_id=worker_id,
            metrics=metrics,
            # Every lease-taking round attempted renews the heartbeat file, when one is asked for.
            on_round=HeartbeatFile(args.heartbeat_file).record if args.heartbeat_file is not None else None,
        )
        worker.install_signal_handlers()
        metrics.start()
        worker.run()
    except StreamConfigError as exc:  # the stream changed between the check and the start
        print(f"error: {exc}{_next_step(settings, str(exc))}", file=sys.stderr)
        return 2
    except (FatalStreamError, LeaseError) as exc:
        log.error("worker stopped: %s", exc)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        metrics.stop()
        logging_handle.close()
    return 0


def _check_local_endpoint(settings: Settings) -> None:
    """With a local endpoint that nobody answers on, say how to start the emulator, and stop."""
    from consumer.commands import CommandError
    from consumer.local_aws import endpoint_answers, is_local_endpoint

    endpoint = settings.endpoint_url
    if endpoint is not None and is_local_endpoint(endpoint) and not endpoint_answers(endpoint):
        raise CommandError(
            f"nothing answers at {endpoint} (endpoint_url of env {settings.env}): "
            f"start the emulator: `consumer local up --env {settings.env}`"
        )


def _next_step(settings: Settings, message: str) -> str:
    """The command that fixes a start-up error on the local emulator, when there is one."""
    from consumer.local_aws import is_local_endpoint

    if not is_local_endpoint(settings.endpoint_url):
        return ""
    if message.startswith("table ") and "does not exist" in message:
        return f"; create the tables env {settings.env} names: `consumer local up --env {settings.env}`"
    return ""

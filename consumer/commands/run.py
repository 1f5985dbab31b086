"""``consumer run``: one worker process of the fleet (what each systemd unit on an instance runs)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from consumer.commands import add_env_arguments, settings_from


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run a worker: take leases, process the stream's shards, checkpoint, until SIGTERM"
    )
    add_env_arguments(parser)
    parser.add_argument("--worker-id", default=None, help="worker id (default: [name@]host:pid:random)")
    parser.add_argument("--worker-name", default=None, help="a readable prefix for the generated worker id")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import boto3

    from consumer.leases.errors import LeaseError
    from consumer.lifecycle.ports import StreamGoneError
    from consumer.lifecycle.stream_binding import SourceReader
    from consumer.lifecycle.stream_target import StreamConfigError
    from consumer.lifecycle.worker import AwsClients, Worker, new_worker_id
    from consumer.processing.errors import ProcessingConfigError
    from consumer.processing.factory import ProcessingClients, build_processor_factory
    from consumer.processing.lifecycle_bridge import bridged
    from consumer.streams.dynamodb import DynamoDBStreamSource
    from consumer.telemetry.logs import configure_logging
    from consumer.telemetry.metrics import MetricsRecorder
    from consumer.telemetry.sinks import sink_from_settings

    settings = settings_from(args)
    worker_id = args.worker_id or new_worker_id(args.worker_name)
    logging_handle = configure_logging(settings, worker_id)
    log = logging.getLogger("consumer.worker")
    clients = AwsClients.from_settings(settings)
    metrics = MetricsRecorder(settings, worker_id, sink_from_settings(settings, worker_id))
    try:
        aws = {"region_name": settings.region, "endpoint_url": settings.endpoint_url}
        processing = ProcessingClients(
            s3=boto3.client("s3", **aws), sqs=boto3.client("sqs", **aws), dynamodb=clients.dynamodb
        )
        # Everything in processing.* is checked here, before the worker takes a single lease.
        factory = bridged(build_processor_factory(settings, clients=processing, metrics=metrics))
        worker = Worker(
            settings,
            clients=clients,
            processor_factory=factory,
            # The fast path: botocore signs and retries, the adapter parses GetRecords bodies itself.
            reader_factory=lambda arn: SourceReader(DynamoDBStreamSource(clients.streams), arn),
            worker_id=worker_id,
            metrics=metrics,
        )
        worker.install_signal_handlers()
        metrics.start()
        worker.run()
    except (ProcessingConfigError, StreamConfigError) as exc:
        log.error("cannot start: %s", exc)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (StreamGoneError, LeaseError) as exc:
        log.error("worker stopped: %s", exc)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        metrics.stop()
        logging_handle.close()
    return 0

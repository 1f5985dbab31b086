"""The processor registry: ``processing.processor`` from the settings, built into a factory of
:class:`~consumer.processing.api.RecordProcessor` — once, at start-up, before any lease is taken.

It lives in the runtime layer because it is wiring: it knows the built-in sinks
(:mod:`consumer.sinks`, which are processors written on :mod:`consumer.processing`'s API) and the
user's import path, and joins them with the failure policy, filters and batching that
:mod:`consumer.processing.factory` provides. Neither the sinks nor the processing layer import it.

``processing.processor`` is a built-in sink (:data:`BUILT_IN_SINKS`), a user object
``package.module:Name`` (see :func:`consumer.processing.factory.user_processor`) or an AWS Lambda
handler ``lambda:module.function`` (:mod:`consumer.processing.lambda_form`). Every problem
(unknown sink, missing destination, a path that does not import, bad options) raises
ProcessingConfigError here, naming the key to fix.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from consumer.processing.api import ProcessorFactory, RecordProcessor
from consumer.processing.dead_letter import build_dead_letter
from consumer.processing.errors import ProcessingConfigError
from consumer.processing.factory import (
    HandlerFactory,
    WindowPlan,
    check_options,
    import_processor,
    runner_chain,
    user_processor,
)
from consumer.processing.filters import RecordFilter
from consumer.processing.function_processor import FunctionProcessor
from consumer.processing.lambda_form import (
    Invoker,
    LambdaEnvironment,
    LambdaFunction,
    check_handler,
    handler_path,
    is_lambda_form,
    lambda_handlers,
)
from consumer.processing.retry import RetryPolicy
from consumer.processing.window_state import DynamoDBWindowStateStore, WindowStateStore
from consumer.records import ShardInfo
from consumer.sinks.changelog import ChangelogSink, ChangelogStore
from consumer.sinks.dynamodb_replica import DEFAULT_SEQUENCE_ATTRIBUTE, DynamoDBReplicaSink
from consumer.telemetry.metrics import Metrics
from consumer.telemetry.transports import log_stream_name
from ground.clock import Clock, SystemClock
from ground.settings import Settings
from ground.threads import SYSTEM_THREADS, Threads


@dataclass(frozen=True)
class ProcessingClients:
    """boto3 clients the sinks and dead letters use (built by :mod:`consumer.runtime.clients`, never here)."""

    s3: Any = None
    sqs: Any = None
    dynamodb: Any = None  # for dynamodb_replica when options give no other region or endpoint
    replica_dynamodb: Any = None  # for dynamodb_replica in another region / endpoint
    # Tumbling windows' state: None means the window-state table, through ``dynamodb`` (tests and
    # examples give an InMemoryWindowStateStore).
    window_states: WindowStateStore | None = None


SinkBuilder = Callable[[Settings, dict[str, Any], "ProcessingClients"], HandlerFactory]


def _changelog(settings: Settings, options: dict[str, Any], clients: ProcessingClients) -> HandlerFactory:
    check_options("changelog", options, ("destination", "format"))
    destination = options.get("destination", settings.pipeline.changelog_uri)
    if not isinstance(destination, str) or not destination:
        raise ProcessingConfigError(
            "processing.options.destination: the changelog sink needs a directory or s3://bucket/prefix"
        )
    fmt = options.get("format", "jsonl")
    if fmt not in ("jsonl", "parquet"):
        raise ProcessingConfigError(f"processing.options.format {fmt!r}: use jsonl or parquet")
    if destination.startswith("s3://"):
        if not destination[5:].partition("/")[0]:
            raise ProcessingConfigError(f"processing.options.destination {destination!r} names no bucket")
        if clients.s3 is None:
            raise ProcessingConfigError(f"the changelog sink needs an S3 client for {destination}")
    store = ChangelogStore(destination, s3_client=clients.s3)
    table = settings.table.name
    # One sink per lease: what it knows about the shard's landed objects lives and dies with the
    # ownership (docs/processing.md "Redelivery").
    return lambda shard: ChangelogSink(store, table, fmt=fmt)


def _replica(settings: Settings, options: dict[str, Any], clients: ProcessingClients) -> HandlerFactory:
    check_options(
        "dynamodb_replica",
        options,
        ("table", "region", "endpoint_url", "sequence_attribute", "tombstone_table"),
    )
    table = options.get("table")
    if not isinstance(table, str) or not table:
        raise ProcessingConfigError("processing.options.table: dynamodb_replica needs the replica table name")
    if settings.table.stream_view_type not in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES"):
        raise ProcessingConfigError(
            f"dynamodb_replica needs table.stream_view_type NEW_IMAGE or NEW_AND_OLD_IMAGES, "
            f"not {settings.table.stream_view_type}"
        )
    client = clients.replica_dynamodb
    if client is None:
        if options.get("region") or options.get("endpoint_url"):
            import boto3  # a client for another region, created at start-up (never at import)

            client = boto3.client(
                "dynamodb",
                region_name=options.get("region") or settings.region,
                endpoint_url=options.get("endpoint_url"),
            )
        else:
            client = clients.dynamodb
    if client is None:
        raise ProcessingConfigError("dynamodb_replica needs a DynamoDB client (ProcessingClients.dynamodb)")
    tombstones = options.get("tombstone_table")
    sink = DynamoDBReplicaSink(
        table,
        client,
        sequence_attribute=str(options.get("sequence_attribute", DEFAULT_SEQUENCE_ATTRIBUTE)),
        tombstone_table=str(tombstones) if tombstones else None,
    )
    return lambda shard: sink


BUILT_IN_SINKS: dict[str, SinkBuilder] = {"changelog": _changelog, "dynamodb_replica": _replica}
"""The processors this product ships, by the name ``processing.processor`` gives them."""


def build_processor_factory(
    settings: Settings,
    *,
    clients: ProcessingClients | None = None,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
    rng: random.Random | None = None,
    stream_arn: Callable[[], str] | None = None,
    worker_id: str = "",
    threads: Threads = SYSTEM_THREADS,
) -> ProcessorFactory:
    """Validate ``settings.processing`` and return ``factory(shard) -> RecordProcessor``.

    ``stream_arn`` and ``worker_id`` are for a Lambda handler's event and context: the stream's ARN
    (asked at each invocation, since a worker resolves its stream after this check) and the worker
    whose log stream the handler's logs go to. Lanes run on pools of ``threads`` (a simulation gives
    its own, ground/threads.py).
    """
    processing = settings.processing
    clients = clients or ProcessingClients()
    clock = clock or SystemClock()
    options = dict(processing.options)
    if is_lambda_form(processing.processor):
        handlers = _lambda_form(settings, clock, stream_arn, worker_id)
        return policy_wrapped(settings, handlers, clients=clients, clock=clock, metrics=metrics, rng=rng)
    built_in = BUILT_IN_SINKS.get(processing.processor)
    if built_in is not None and processing.tumbling_window_seconds:
        raise ProcessingConfigError(
            f"processing.tumbling_window_seconds: the built-in {processing.processor} sink does not "
            "aggregate; windows are for a handler of your own, handle(batch: WindowedBatch) -> state"
        )
    if built_in is not None:
        return policy_wrapped(
            settings,
            built_in(settings, options, clients),
            clients=clients,
            clock=clock,
            metrics=metrics,
            rng=rng,
            threads=threads,
        )
    if ":" not in processing.processor:
        names = sorted(BUILT_IN_SINKS)
        close = difflib.get_close_matches(processing.processor, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ProcessingConfigError(
            f"processing.processor {processing.processor!r} is not a built-in ({', '.join(names)}); "
            f"{hint}a processor of your own is given as 'package.module:Name'"
        )
    made = user_processor(processing.processor, options, processing.import_paths)
    if made.class_form is not None:
        for key, value, off in (
            ("parallelization_factor", processing.parallelization_factor, 1),
            ("tumbling_window_seconds", processing.tumbling_window_seconds, 0),
            ("on_failure", processing.on_failure, "block"),
        ):
            if value != off:
                raise ProcessingConfigError(
                    f"processing.{key}: {value} applies to the function form and the built-in sinks; "
                    f"the class form {processing.processor!r} gets each batch whole and checkpoints "
                    f"itself (set it to {off}, or give the class a handle(batch) method)"
                )
        return made.class_form
    assert made.handlers is not None
    return policy_wrapped(
        settings, made.handlers, clients=clients, clock=clock, metrics=metrics, rng=rng, threads=threads
    )


def _no_stream() -> str:
    raise ProcessingConfigError(
        "a Lambda handler's event names its stream (eventSourceARN): build_processor_factory needs "
        "stream_arn to run one"
    )


def _lambda_form(
    settings: Settings, clock: Clock, stream_arn: Callable[[], str] | None, worker_id: str
) -> HandlerFactory:
    """``lambda:module.function``: the handler imported and checked, its options read, and one
    invoker (one turn-taking lock) for every shard of this process."""
    processing = settings.processing
    path = handler_path(processing.processor)
    function = LambdaFunction.from_options(processing.options, settings.application_name)
    handler = check_handler(path, import_processor(path, processing.import_paths))
    if processing.parallelization_factor > 1 and not function.thread_safe:
        raise ProcessingConfigError(
            f"processing.parallelization_factor {processing.parallelization_factor} runs the Lambda "
            "handler in several threads of one process at once, where Lambda gives each concurrent "
            "batch its own execution environment; set processing.options.thread_safe: true if the "
            "handler keeps no per-invocation state at module level (Powertools' BatchProcessor does), "
            "or set the factor to 1"
        )
    environment = LambdaEnvironment(
        stream_arn or _no_stream,
        settings.application_log_group,
        log_stream_name(worker_id) if worker_id else "",
    )
    invoker = Invoker(handler, function, environment, clock)
    return lambda_handlers(invoker, windowed=processing.tumbling_window_seconds > 0)


def _window_states(settings: Settings, clients: ProcessingClients) -> WindowStateStore:
    """Where tumbling windows keep their state: the given store, or the window-state table (checked
    now, so a missing table stops the start, not the first window)."""
    if clients.window_states is not None:
        return clients.window_states
    if clients.dynamodb is None:
        raise ProcessingConfigError(
            "processing.tumbling_window_seconds needs a DynamoDB client for the window-state "
            f"table {settings.window_state_table_name} (ProcessingClients.dynamodb)"
        )
    table = DynamoDBWindowStateStore(
        clients.dynamodb, settings.window_state_table_name, settings.application_name
    )
    problem = table.check()
    if problem is not None:
        raise ProcessingConfigError(
            f"processing.tumbling_window_seconds: {problem} (`consumer local up` creates it on "
            "the emulator, the CDK stack on AWS)"
        )
    return table


def policy_wrapped(
    settings: Settings,
    handlers: HandlerFactory,
    *,
    clients: ProcessingClients,
    clock: Clock,
    metrics: Metrics | None,
    rng: random.Random | None,
    threads: Threads = SYSTEM_THREADS,
) -> ProcessorFactory:
    """Function-form handlers as RecordProcessors: retries, dead letter, filter, batching, lanes and
    windows from ``settings.processing``, all checked now (before any lease)."""
    processing = settings.processing
    policy = RetryPolicy.from_settings(processing.retry, rng)
    dead_letter = build_dead_letter(processing.dead_letter, s3_client=clients.s3, sqs_client=clients.sqs)
    record_filter = RecordFilter.from_settings(processing.filter)
    batching = processing.batching
    if batching.max_window_millis > 0 and not settings.worker.call_process_records_even_for_empty_record_list:
        raise ProcessingConfigError(
            "processing.batching.max_window_millis > 0 needs "
            "worker.call_process_records_even_for_empty_record_list: true (a quiet shard would "
            "otherwise hold its buffer until the next record arrives)"
        )
    if (
        processing.on_failure == "park_key"
        and not settings.worker.call_process_records_even_for_empty_record_list
    ):
        raise ProcessingConfigError(
            "processing.on_failure: park_key needs "
            "worker.call_process_records_even_for_empty_record_list: true (a parked key is retried "
            "when its shard's processor is called; a quiet shard would otherwise hold it until the "
            "next record arrives)"
        )
    window: WindowPlan | None = None
    if processing.tumbling_window_seconds > 0:
        if processing.parallelization_factor > 1:
            raise ProcessingConfigError(
                "processing.tumbling_window_seconds and processing.parallelization_factor > 1 cannot be "
                "combined: a window's state is one per shard, carried batch to batch in order"
            )
        window = WindowPlan(
            processing.tumbling_window_seconds,
            _window_states(settings, clients),
            processing.max_window_state_bytes,
        )

    def factory(shard: ShardInfo) -> RecordProcessor:
        runner = runner_chain(
            handlers(shard),
            policy=policy,
            clock=clock,
            dead_letter=dead_letter,
            metrics=metrics,
            batch_size=batching.batch_size,
            lanes=processing.parallelization_factor,
            window=window,
            threads=threads,
            on_failure=processing.on_failure,
            max_parked_records=processing.max_parked_records,
        )
        return FunctionProcessor(
            runner,
            clock,
            record_filter=record_filter,
            batch_size=batching.batch_size,
            max_window_millis=batching.max_window_millis,
        )

    return factory

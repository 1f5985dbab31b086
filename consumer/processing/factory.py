"""Build the per-shard processor factory from ``settings.processing`` — once, before any lease.

``processing.processor`` is a built-in sink (``changelog``, ``dynamodb_replica``) or a user object
``package.module:Name``:

* a class with the five RecordProcessor methods → class form, one instance per shard (``options``
  as keyword arguments); checkpoints are the class's business;
* a class with a ``handle(batch)`` method → function form, one instance per shard with ``options``;
* a plain function ``handle(batch)`` → function form (``options`` must be empty).

User code is imported from ``processing.import_paths`` (default: the working directory) before the
installed packages, so a processor in the project ``consumer run`` is started from just works.

The function form is wrapped with the failure policy, filter and batching. Every problem (unknown
sink, missing destination, a path that does not import, bad options) raises ProcessingConfigError
here, naming the key to fix.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.clock import Clock, SystemClock
from consumer.processing.api import BatchHandler, ProcessorFactory, RecordProcessor
from consumer.processing.dead_letter import build_dead_letter
from consumer.processing.errors import ProcessingConfigError
from consumer.processing.failure_policy import FailurePolicyRunner
from consumer.processing.filters import RecordFilter
from consumer.processing.function_processor import FunctionProcessor
from consumer.processing.retry import RetryPolicy
from consumer.records import ShardInfo
from consumer.settings import Settings
from consumer.telemetry.metrics import Metrics

BUILT_INS = ("changelog", "dynamodb_replica")
CLASS_METHODS = ("initialize", "process_records", "lease_lost", "shard_ended", "shutdown_requested")
HandlerFactory = Callable[[ShardInfo], BatchHandler]


@dataclass(frozen=True)
class ProcessingClients:
    """boto3 clients the sinks and dead letters use (injected; created by the caller, never here)."""

    s3: Any = None
    sqs: Any = None
    dynamodb: Any = None  # for dynamodb_replica when options give no other region or endpoint
    replica_dynamodb: Any = None  # for dynamodb_replica in another region / endpoint


def _check_options(sink: str, options: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ProcessingConfigError(
            f"processing.options for {sink}: unknown {', '.join(unknown)} (allowed: {', '.join(allowed)})"
        )


def _changelog(settings: Settings, options: dict[str, Any], clients: ProcessingClients) -> HandlerFactory:
    # The built-in sinks are imported when chosen, not with this module: they are processors built
    # on consumer.processing's API, so importing them here made an import circle (importing
    # consumer.sinks.changelog first failed). The wiring belongs in a layer above both (issue 18).
    from consumer.sinks.changelog import ChangelogSink, ChangelogStore

    _check_options("changelog", options, ("destination", "format"))
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
    from consumer.sinks.dynamodb_replica import (
        DEFAULT_SEQUENCE_ATTRIBUTE,
        DynamoDBReplicaSink,
    )  # see _changelog

    _check_options(
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


def _search_path(import_paths: Sequence[str]) -> list[str]:
    """``processing.import_paths`` as absolute directories, put ahead of the installed packages.

    The user's project is where ``consumer run`` is started (the working directory; on the fleet
    the systemd unit's WorkingDirectory), so ``myproc.counter:handle`` imports ``./myproc/counter.py``
    without anybody having to know about PYTHONPATH.
    """
    directories = [str(Path(entry).expanduser().resolve()) for entry in import_paths]
    for directory in reversed(directories):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    return directories


def import_processor(path: str, import_paths: Sequence[str] = (".",)) -> Any:
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ProcessingConfigError(
            f"processing.processor {path!r} is neither a built-in ({', '.join(BUILT_INS)}) nor "
            "'package.module:Name' (a RecordProcessor class, a class with handle(batch), or a function)"
        )
    directories = _search_path(import_paths)
    importlib.invalidate_caches()  # a module written a moment ago (the scaffold) must be found
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            expected = module_name.replace(".", "/") + ".py"
            raise ProcessingConfigError(
                f"processing.processor {path!r}: module {module_name} does not import: no {expected} "
                f"in {', '.join(directories)} (processing.import_paths) or the installed packages; "
                "run from your project's directory or add it to processing.import_paths"
            ) from exc
        raise ProcessingConfigError(
            f"processing.processor {path!r}: module {module_name} does not import: {exc!r}"
        ) from exc
    except Exception as exc:
        raise ProcessingConfigError(
            f"processing.processor {path!r}: module {module_name} does not import: {exc!r}"
        ) from exc
    found = getattr(module, attribute, None)
    if found is None:
        raise ProcessingConfigError(
            f"processing.processor {path!r}: {module_name} ({getattr(module, '__file__', '?')}) "
            f"has no {attribute}"
        )
    return found


def _instantiate(path: str, cls: type[Any], options: dict[str, Any]) -> Any:
    try:
        return cls(**options)
    except Exception as exc:
        raise ProcessingConfigError(
            f"processing.processor {path!r} cannot be created with processing.options {options}: {exc!r}"
        ) from exc


@dataclass(frozen=True)
class _ClassForm:
    """Creates one user RecordProcessor per shard."""

    cls: type[Any]
    options: dict[str, Any]

    def __call__(self, shard: ShardInfo) -> RecordProcessor:
        processor: RecordProcessor = self.cls(**self.options)
        return processor


def _handler_of(instance: Any) -> BatchHandler:
    handle: BatchHandler = instance.handle
    return handle


def _user(
    path: str, options: dict[str, Any], import_paths: Sequence[str]
) -> ProcessorFactory | HandlerFactory:
    """A factory of RecordProcessors (class form) or of handlers (function form)."""
    found = import_processor(path, import_paths)
    if inspect.isclass(found):
        if all(callable(getattr(found, m, None)) for m in CLASS_METHODS):
            _instantiate(path, found, options)  # bad options fail now, not at the first lease
            return _ClassForm(found, options)
        if callable(getattr(found, "handle", None)):
            _instantiate(path, found, options)
            return lambda shard: _handler_of(found(**options))
        missing = [m for m in CLASS_METHODS if not callable(getattr(found, m, None))]
        raise ProcessingConfigError(
            f"processing.processor {path!r}: class lacks {', '.join(missing)} (or a handle(batch) method)"
        )
    if callable(found):
        if options:
            raise ProcessingConfigError(
                f"processing.options {sorted(options)} cannot be passed to the function {path!r}: "
                "remove processing.options, or use a class with handle(batch) to receive options"
            )
        return lambda shard: found
    raise ProcessingConfigError(f"processing.processor {path!r} is not a class or a function")


def build_processor_factory(
    settings: Settings,
    *,
    clients: ProcessingClients | None = None,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
    rng: random.Random | None = None,
) -> ProcessorFactory:
    """Validate ``settings.processing`` and return ``factory(shard) -> RecordProcessor``."""
    processing = settings.processing
    clients = clients or ProcessingClients()
    clock = clock or SystemClock()
    options = dict(processing.options)
    make: ProcessorFactory | HandlerFactory
    if processing.processor == "changelog":
        make = _changelog(settings, options, clients)
    elif processing.processor == "dynamodb_replica":
        make = _replica(settings, options, clients)
    elif ":" not in processing.processor:
        close = difflib.get_close_matches(processing.processor, BUILT_INS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ProcessingConfigError(
            f"processing.processor {processing.processor!r} is not a built-in ({', '.join(BUILT_INS)}); "
            f"{hint}a processor of your own is given as 'package.module:Name'"
        )
    else:
        make = _user(processing.processor, options, processing.import_paths)
    if isinstance(make, _ClassForm):
        return make
    handlers: HandlerFactory = make  # type: ignore[assignment]

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

    def factory(shard: ShardInfo) -> RecordProcessor:
        runner = FailurePolicyRunner(
            handlers(shard),
            policy,
            clock,
            dead_letter=dead_letter,
            metrics=metrics,
            max_batch_records=batching.batch_size,
        )
        return FunctionProcessor(
            runner,
            clock,
            record_filter=record_filter,
            max_buffered_records=batching.batch_size,
            max_window_millis=batching.max_window_millis,
        )

    return factory


def function_processor(
    handler: BatchHandler,
    *,
    clock: Clock | None = None,
    policy: RetryPolicy | None = None,
    metrics: Metrics | None = None,
    **kwargs: Any,
) -> FunctionProcessor:
    """A RecordProcessor for one handler, for code that wires processors by hand (tests, examples).

    ``kwargs``: ``dead_letter``, ``record_filter``, ``max_buffered_records``, ``max_window_millis``.
    """
    clock = clock or SystemClock()
    runner = FailurePolicyRunner(
        handler,
        policy or RetryPolicy(),
        clock,
        dead_letter=kwargs.pop("dead_letter", None),
        metrics=metrics,
        max_batch_records=kwargs.get("max_buffered_records", 1000),
    )
    return FunctionProcessor(runner, clock, **kwargs)

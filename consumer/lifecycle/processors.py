"""Build the per-shard processor factory from ``settings.processing`` — at start-up, before any lease.

``processing.processor`` is a built-in (``changelog``) or a user class ``package.module:Name`` whose
instances have the lifecycle's processor methods (initialize, process, shard_ended, lease_lost,
shutdown_requested). Every problem is reported here, with what to change, so a worker with a broken
configuration never takes a lease it cannot process.
"""

from __future__ import annotations

import importlib
from typing import Any

from consumer.lifecycle.changelog import ChangelogProcessor, ChangelogWriter
from consumer.lifecycle.ports import ProcessorFactory, ShardProcessor
from consumer.records import ShardInfo
from consumer.settings import Settings

BUILT_INS = ("changelog",)
REQUIRED_METHODS = ("initialize", "process", "shard_ended", "lease_lost", "shutdown_requested")


class ProcessingConfigError(Exception):
    """``processing`` settings that cannot work; raised before any lease is taken."""


def _user_class(path: str) -> type[Any]:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ProcessingConfigError(
            f"processing.processor {path!r} is neither a built-in ({', '.join(BUILT_INS)}) nor "
            "'package.module:ClassName'"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ProcessingConfigError(
            f"processing.processor {path!r}: module {module_name} does not import: {exc!r}"
        ) from exc
    cls = getattr(module, attribute, None)
    if not isinstance(cls, type):
        raise ProcessingConfigError(f"processing.processor {path!r}: {module_name} has no class {attribute}")
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ProcessingConfigError(f"processing.processor {path!r}: {attribute} lacks {', '.join(missing)}")
    return cls


def build_processor_factory(settings: Settings, *, s3_client: Any = None) -> ProcessorFactory:
    processing = settings.processing
    name = processing.processor
    options = dict(processing.options)
    if name == "changelog":
        destination = options.get("destination")
        if not isinstance(destination, str) or not destination:
            raise ProcessingConfigError(
                "processing.options.destination is required for the changelog sink "
                "(a directory, or s3://bucket/prefix)"
            )
        if destination.startswith("s3://") and s3_client is None:
            raise ProcessingConfigError("the changelog sink needs S3 access for " + destination)
        writer = ChangelogWriter(destination, s3_client=s3_client)
        table = settings.table.name

        def changelog(shard: ShardInfo) -> ShardProcessor:
            return ChangelogProcessor(writer, table)

        return changelog
    if ":" not in name:
        raise ProcessingConfigError(
            f"processing.processor {name!r} is not a built-in ({', '.join(BUILT_INS)}); a processor of "
            "your own is given as 'package.module:ClassName'"
        )
    cls = _user_class(name)

    def user(shard: ShardInfo) -> ShardProcessor:
        instance: ShardProcessor = cls(**options) if options else cls()
        return instance

    try:
        user(ShardInfo("validation"))
    except Exception as exc:
        raise ProcessingConfigError(
            f"processing.processor {name!r} cannot be created with {options}: {exc!r}"
        ) from exc
    return user

"""One worker over several tables' streams (``streams:``): the stream port, the processors and
the metrics of every stream joined into the one set of ports a worker has.

The worker itself does not know there are several streams. :class:`~consumer.streams.namespace.
StreamSet` shows every stream's shards with namespaced ids, so one coordinator balances every
lease of every stream and one sync leader lists every stream; :class:`RoutedProcessors` hands each
shard to its own stream's processor with the shard's own id (a user's processor sees the shard id
DynamoDB gave, as in a single-stream application), and :class:`StreamMetrics` puts the namespace
back on what that processor records, so its figures carry the stream's dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from consumer.lease_keys import split_lease_key
from consumer.processing.api import (
    InitializationInput,
    LeaseLostInput,
    ProcessorFactory,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.processing.errors import ProcessingConfigError
from consumer.records import ShardInfo
from consumer.streams.kinesis_reader import KinesisShardReader
from consumer.streams.namespace import NamespacedStream, StreamSet
from consumer.streams.reader import ShardReader
from consumer.streams.target import StreamConfigError, StreamTarget
from consumer.telemetry.metrics import Metrics


class StreamMetrics:
    """The process's metrics as one stream's processor records them: a shard id gets the stream's
    namespace, so the recorder files it under that stream (its ``Stream`` dimension)."""

    def __init__(self, inner: Metrics, prefix: str = "") -> None:
        self._inner = inner
        self.prefix = prefix  # set once the stream is resolved (the processor is built before)

    def _key(self, shard_id: str | None) -> str | None:
        return None if shard_id is None else f"{self.prefix}{shard_id}"

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        self._inner.count(operation, name, value, unit, self._key(shard_id))

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        self._inner.gauge(operation, name, value, unit, self._key(shard_id))

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        self._inner.timing(operation, name_prefix, millis, success)


class RoutedProcessors:
    """The :data:`~consumer.processing.api.ProcessorFactory` of a several-stream worker: a lease's
    namespace picks its stream's factory, which gets the shard (and its parents) by their own ids."""

    def __init__(self, factories: Mapping[str, ProcessorFactory]) -> None:
        self._factories = dict(factories)

    def __call__(self, shard: ShardInfo) -> RecordProcessor:
        namespace, own = split_lease_key(shard.shard_id)
        factory = self._factories.get(namespace)
        if factory is None:  # StreamSet refuses to read such a lease first; this is the backstop
            raise ProcessingConfigError(f"lease {shard.shard_id!r} belongs to no stream in streams:")
        parents = tuple(split_lease_key(parent)[1] for parent in shard.parent_shard_ids)
        own_shard = ShardInfo(own, parents)
        return OwnShardIds(factory(own_shard), own_shard)


class OwnShardIds:
    """A stream's processor, shown the shard by its own id in every input the lifecycle hands it
    (the lifecycle knows the shard by its lease key, namespaced)."""

    def __init__(self, inner: RecordProcessor, shard: ShardInfo) -> None:
        self._inner = inner
        self._shard = shard

    @property
    def records_end_to_end_lag(self) -> bool:
        """The inner processor's runner records EndToEndLag itself (the function form)."""
        return bool(getattr(self._inner, "records_end_to_end_lag", False))

    def initialize(self, initialization: InitializationInput) -> None:
        self._inner.initialize(replace(initialization, shard=self._shard))

    def process_records(self, process: ProcessRecordsInput) -> None:
        self._inner.process_records(replace(process, shard=self._shard))

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        self._inner.lease_lost(replace(lease_lost, shard=self._shard))

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        self._inner.shard_ended(replace(shard_ended, shard=self._shard))

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        self._inner.shutdown_requested(replace(shutdown, shard=self._shard))


Built = TypeVar("Built")


@dataclass(frozen=True)
class StreamParts:
    """What each configured stream contributes: its resolved stream, its bound reader (namespaced
    with several streams), its factory."""

    target: StreamTarget
    reader: ShardReader | KinesisShardReader
    processors: ProcessorFactory
    namespaced: NamespacedStream | None = None


def joined(parts: Sequence[StreamParts]) -> tuple[StreamSet, RoutedProcessors]:
    """The one stream port and the one processor factory of a worker over ``parts``."""
    streams = [p.namespaced or NamespacedStream(p.reader, p.target.table_name) for p in parts]
    factories = {stream.prefix: p.processors for stream, p in zip(streams, parts, strict=True)}
    return StreamSet(streams), RoutedProcessors(factories)


def naming_the_entry(index: int | None, build: Callable[[], Built]) -> Built:
    """``build()``, with its configuration error said of ``streams.<index>`` (the processing and
    table keys it names are that entry's, not the top level's); as it is for ``index`` None (one
    stream, configured by ``table:``)."""
    if index is None:
        return build()
    try:
        return build()
    except ProcessingConfigError as exc:
        raise ProcessingConfigError(f"streams.{index}: {exc}") from exc
    except StreamConfigError as exc:
        raise StreamConfigError(f"streams.{index}: {exc}") from exc

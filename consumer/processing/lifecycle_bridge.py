"""Present a RecordProcessor through the lifecycle's ``ShardProcessor`` port.

The lifecycle (consumer/lifecycle/ports.py) calls positional methods; this wraps each call into the
frozen input the processor API defines, so either side can change without the other.

The port passes ``should_stop`` only to ``process``; the bridge keeps the last one and hands it to
``shard_ended`` and ``shutdown_requested`` too. During a requested shutdown it is already true, so
a function-form buffer is not flushed then (nothing is checkpointed past it; the next owner reads
those records again) and a stuck record cannot hold a graceful stop forever.
"""

from __future__ import annotations

from collections.abc import Callable

from consumer.processing.api import (
    Checkpointer,
    InitializationInput,
    LeaseLostInput,
    ProcessorFactory,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownRequestedInput,
    _always,
)
from consumer.records import ShardInfo, StreamRecord


def _never() -> bool:
    return False


class LifecycleBridge:
    def __init__(self, processor: RecordProcessor, shard: ShardInfo) -> None:
        self.processor = processor
        self._shard = shard
        self._should_stop: Callable[[], bool] = _never

    def initialize(self, shard: ShardInfo, checkpoint: str) -> None:
        self._shard = shard
        self.processor.initialize(InitializationInput(shard, checkpoint))

    def process(
        self,
        records: tuple[StreamRecord, ...],
        millis_behind_latest: int,
        checkpointer: Checkpointer,
        should_stop: Callable[[], bool],
        lease_held: Callable[[], bool] | None = None,
    ) -> None:
        self._should_stop = should_stop
        self.processor.process_records(
            ProcessRecordsInput(
                records, checkpointer, millis_behind_latest, self._shard, should_stop, lease_held or _always
            )
        )

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self.processor.shard_ended(ShardEndedInput(self._shard, checkpointer, self._should_stop))

    def lease_lost(self) -> None:
        self.processor.lease_lost(LeaseLostInput(self._shard))

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.processor.shutdown_requested(
            ShutdownRequestedInput(self._shard, checkpointer, self._should_stop)
        )


def bridged(factory: ProcessorFactory) -> Callable[[ShardInfo], LifecycleBridge]:
    """The lifecycle's processor factory built from the processing one."""
    return lambda shard: LifecycleBridge(factory(shard), shard)

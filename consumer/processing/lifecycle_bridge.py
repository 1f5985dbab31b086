"""Present a RecordProcessor through the lifecycle's ``ShardProcessor`` port.

The lifecycle (consumer/lifecycle/ports.py) calls positional methods; this wraps each call into the
frozen input the processor API defines, so either side can change without the other.
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
)
from consumer.records import ShardInfo, StreamRecord


class LifecycleBridge:
    def __init__(self, processor: RecordProcessor, shard: ShardInfo) -> None:
        self.processor = processor
        self._shard = shard

    def initialize(self, shard: ShardInfo, checkpoint: str) -> None:
        self._shard = shard
        self.processor.initialize(InitializationInput(shard, checkpoint))

    def process(
        self,
        records: tuple[StreamRecord, ...],
        millis_behind_latest: int,
        checkpointer: Checkpointer,
        should_stop: Callable[[], bool],
    ) -> None:
        self.processor.process_records(
            ProcessRecordsInput(records, checkpointer, millis_behind_latest, self._shard, should_stop)
        )

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self.processor.shard_ended(ShardEndedInput(self._shard, checkpointer))

    def lease_lost(self) -> None:
        self.processor.lease_lost(LeaseLostInput(self._shard))

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.processor.shutdown_requested(ShutdownRequestedInput(self._shard, checkpointer))


def bridged(factory: ProcessorFactory) -> Callable[[ShardInfo], LifecycleBridge]:
    """The lifecycle's processor factory built from the processing one."""
    return lambda shard: LifecycleBridge(factory(shard), shard)

"""Processors named by import path in the factory tests."""

from __future__ import annotations

from consumer.processing import (
    Batch,
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)

handled: list[int] = []


class CheckpointEveryBatch:
    def __init__(self, label: str = "x") -> None:
        self.label = label

    def initialize(self, initialization: InitializationInput) -> None:
        return None

    def process_records(self, process: ProcessRecordsInput) -> None:
        process.checkpointer.checkpoint()

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        return None

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        shard_ended.checkpointer.checkpoint_shard_end()

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        shutdown.checkpointer.checkpoint()


class Indexer:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def handle(self, batch: Batch) -> None:
        handled.extend(int(r.sequence_number) for r in batch.records)


def handle(batch: Batch) -> None:
    handled.extend(int(r.sequence_number) for r in batch.records)


class NotAProcessor:
    pass


class CustomTimeoutError(Exception):
    pass

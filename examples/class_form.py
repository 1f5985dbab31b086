"""The class form: five methods, one frozen input each; the class decides when to checkpoint.

Configure it with ``processing.processor: examples.class_form:AuditTrail`` and
``processing.options: {checkpoint_every: 100}`` (options are constructor arguments; one instance
per shard lease). Run it: ``python -m examples.class_form``.
"""

from __future__ import annotations

from consumer.processing import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)


class AuditTrail:
    """Prints one audit line per change and checkpoints every ``checkpoint_every`` records."""

    def __init__(self, checkpoint_every: int = 100) -> None:
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be at least 1")
        self.checkpoint_every = checkpoint_every
        self.since_checkpoint = 0
        self.last_done: str | None = None
        self.lines: list[str] = []

    def initialize(self, initialization: InitializationInput) -> None:
        self.lines.append(f"start {initialization.shard.shard_id} after {initialization.checkpoint}")

    def process_records(self, process: ProcessRecordsInput) -> None:
        for record in process.records:
            if process.should_stop():
                break  # lease going away: stop early, the next owner resumes at the checkpoint
            self.lines.append(f"{record.sequence_number} {record.event_name} {record.keys}")
            self.last_done = record.sequence_number
            self.since_checkpoint += 1
            if self.since_checkpoint >= self.checkpoint_every:
                process.checkpointer.checkpoint(record.sequence_number)  # never past what is done
                self.since_checkpoint = 0

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        self.lines.append(f"lost {lease_lost.shard.shard_id}")  # checkpointing now would raise

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        shard_ended.checkpointer.checkpoint_shard_end()  # lets the child shards start

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        if self.last_done is not None and self.since_checkpoint:
            shutdown.checkpointer.checkpoint(self.last_done)


def main() -> None:
    from consumer.processing import InMemoryCheckpointer
    from consumer.records import ShardInfo
    from examples.sample_records import SHARD_ID, sample_records

    shard = ShardInfo(SHARD_ID)
    processor = AuditTrail(checkpoint_every=4)
    checkpointer = InMemoryCheckpointer(SHARD_ID)
    processor.initialize(InitializationInput(shard, "TRIM_HORIZON"))
    records = sample_records()
    checkpointer.delivered(records[-1].sequence_number)
    processor.process_records(ProcessRecordsInput(records, checkpointer, 0, shard))
    processor.shutdown_requested(ShutdownRequestedInput(shard, checkpointer))
    print("\n".join(processor.lines))
    print(f"checkpoints: {checkpointer.history}")


if __name__ == "__main__":
    main()

"""The function form: ``handle(batch)``; return normally and the batch is checkpointed.

Configure it with ``processing.processor: examples.function_form:handle``; the retry policy, dead
letter, filter and batching all come from ``processing.*`` settings. Run this file to see it drive
one shard through the same adapter a worker uses: ``python -m examples.function_form``.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from consumer.processing import Batch, BatchResult, NonRetryableError

totals: dict[str, Decimal] = defaultdict(Decimal)


def handle(batch: Batch) -> BatchResult | None:
    for record in batch.records:
        image = record.new_image
        if record.event_name == "REMOVE" or image is None:
            continue
        if "total" not in image:
            # This order will never have a total: do not retry it, send it to the dead letter.
            raise NonRetryableError(f"order {record.keys} has no total")
        totals[record.keys["pk"]] += image["total"]  # Decimal: no float rounding
    return None  # the whole batch succeeded: the adapter checkpoints after its last record


def main() -> None:
    from consumer.processing import InMemoryCheckpointer, ProcessRecordsInput, function_processor
    from consumer.records import ShardInfo
    from examples.sample_records import SHARD_ID, sample_records

    processor = function_processor(handle)
    checkpointer = InMemoryCheckpointer(SHARD_ID)
    records = sample_records()
    checkpointer.delivered(records[-1].sequence_number)  # what the lifecycle does before each batch
    processor.process_records(ProcessRecordsInput(records, checkpointer, 0, ShardInfo(SHARD_ID)))
    for customer, total in sorted(totals.items()):
        print(f"{customer}: {total}")
    print(f"checkpoint: {checkpointer.last_checkpoint}")


if __name__ == "__main__":
    main()

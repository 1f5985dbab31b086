"""An indexer against a deliberately slow sink, run with per-key parallelism.

Each record costs one call to a search index that answers in ``delay_millis`` (20 ms: a remote
service), so one shard moves 50 records/s serially, whatever the worker's CPU. With

```yaml
processing:
  processor: examples.parallel_indexer:SlowIndexer
  options: {delay_millis: 20}
  parallelization_factor: 10
```

the shard's records are spread over 10 lanes by a hash of their keys: ten calls in flight, every
document's changes still applied in order (one document's records are all in one lane). The sink
here is an in-process stand-in that refuses a change older than the one it holds — the check a real
index does with external versioning (``version_type=external``, the sequence number as version) — and
counts such refusals, which per-key order keeps at zero. Run it: ``python -m examples.parallel_indexer``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from consumer.processing import Batch, BatchResult


class SlowIndex:
    """A stand-in search index: documents by id, each with the sequence number it was written at."""

    def __init__(self, delay_millis: int) -> None:
        self._delay = delay_millis / 1000
        self._lock = threading.Lock()
        self.documents: dict[str, tuple[int, dict[str, Any] | None]] = {}
        self.out_of_order = 0  # changes older than the document's: what per-key order rules out

    def apply(self, doc_id: str, version: int, source: dict[str, Any] | None) -> None:
        time.sleep(self._delay)  # the round trip to the index
        with self._lock:
            held = self.documents.get(doc_id)
            if held is not None and held[0] > version:
                self.out_of_order += 1
                return
            self.documents[doc_id] = (version, source)


_indexes: dict[int, SlowIndex] = {}
_indexes_lock = threading.Lock()


def shared_index(delay_millis: int) -> SlowIndex:
    """One index per process (every shard's handler writes to it, like a real cluster)."""
    with _indexes_lock:
        return _indexes.setdefault(delay_millis, SlowIndex(delay_millis))


class SlowIndexer:
    """Function form: one ``apply`` per record; a REMOVE deletes (indexes ``None``)."""

    def __init__(self, delay_millis: int = 20) -> None:
        self.index = shared_index(int(delay_millis))

    def handle(self, batch: Batch) -> BatchResult | None:
        for record in batch.records:
            doc_id = "|".join(str(v) for _, v in sorted(record.keys.items()))
            source = None if record.event_name == "REMOVE" else record.new_image
            self.index.apply(doc_id, int(record.sequence_number), source)
        return None


def run(
    factor: int, count: int = 200, keys: int = 40, delay_millis: int = 20
) -> tuple[SlowIndex, str, float]:
    """Index ``count`` changes of ``keys`` documents with ``factor`` lanes: (index, checkpoint, seconds)."""
    from consumer.processing import InMemoryCheckpointer, ProcessRecordsInput, function_processor
    from consumer.records import ShardInfo, StreamRecord

    indexer = SlowIndexer(delay_millis)
    indexer.index = SlowIndex(delay_millis)  # a fresh index per run, for the comparison below
    shard = ShardInfo("shardId-00000001700000000000-indexer")
    records = tuple(
        StreamRecord(
            {
                "eventID": f"e{n}",
                "eventName": "MODIFY",
                "dynamodb": {
                    "Keys": {"pk": {"S": f"doc-{n % keys}"}},
                    "NewImage": {"pk": {"S": f"doc-{n % keys}"}, "n": {"N": str(n)}},
                    "SequenceNumber": str(1000 + n).zfill(21),
                    "SizeBytes": 40,
                },
            },
            shard.shard_id,
        )
        for n in range(count)
    )
    processor = function_processor(indexer.handle, parallelization_factor=factor)
    checkpointer = InMemoryCheckpointer(shard.shard_id)
    checkpointer.delivered(records[-1].sequence_number)
    started = time.monotonic()
    processor.process_records(ProcessRecordsInput(records, checkpointer, 0, shard))
    return indexer.index, checkpointer.last_checkpoint, time.monotonic() - started


def main() -> None:
    for factor in (1, 10):
        index, checkpoint, seconds = run(factor)
        print(
            f"parallelization_factor {factor}: 200 changes of 40 documents in {seconds:.2f} s, "
            f"{len(index.documents)} documents, {index.out_of_order} out of order, checkpoint {checkpoint}"
        )


if __name__ == "__main__":
    main()

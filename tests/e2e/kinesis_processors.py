"""A function-form handler for the Kinesis end-to-end tests: it writes every user record it is handed
to ``<out_dir>/<pid>.jsonl`` (shard, sequence and sub-sequence numbers, partition key, data), so a
test can tell which process delivered what and in which order.

``die_at_call``: that call of the process (counted over all its shards) SIGKILLs the process before
it records anything, once per ``die_marker`` file (a restarted worker with the same settings lives):
a worker killed between two batches, its checkpoint wherever the previous batch left it.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path

from consumer.processing import Batch
from consumer.records.kinesis_stream_record import KinesisStreamRecord

_CALLS = itertools.count(1)


class RecordingHandler:
    def __init__(self, out_dir: str, die_at_call: int | str = 0, die_marker: str = "") -> None:
        self._out = Path(out_dir) / f"{os.getpid()}.jsonl"
        self._out.parent.mkdir(parents=True, exist_ok=True)
        self._die_at = int(die_at_call)
        self._marker = Path(die_marker) if die_marker else None

    def handle(self, batch: Batch) -> None:
        call = next(_CALLS)
        if self._die_at and call == self._die_at and self._marker is not None and not self._marker.exists():
            self._marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        lines = []
        at = time.time()  # when it was handed on: merges several processes' records in delivery order
        for record in batch.records:
            if isinstance(record, KinesisStreamRecord):
                line = {
                    "stream": "kinesis",
                    "at": at,
                    "shard": batch.shard_id,
                    "seq": record.sequence_number,
                    "sub": record.sub_sequence_number,
                    "key": record.partition_key,
                    "data": record.data.decode(),
                }
            else:
                line = {
                    "stream": "dynamodb",
                    "at": at,
                    "shard": batch.shard_id,
                    "seq": record.sequence_number,
                    "sub": 0,
                    "key": str(record.keys.get("pk")),
                    "data": json.dumps(record.new_image, sort_keys=True, default=str),
                    "event": record.event_name,
                }
            lines.append(json.dumps(line))
        with self._out.open("a", encoding="utf-8") as out:
            out.write("".join(f"{line}\n" for line in lines))


def read_deliveries(out_dir: Path) -> dict[int, list[dict[str, object]]]:
    """pid -> the records that process recorded, in the order it recorded them."""
    found: dict[int, list[dict[str, object]]] = {}
    for path in sorted(out_dir.glob("*.jsonl")):
        found[int(path.stem)] = [json.loads(line) for line in path.read_text().splitlines() if line]
    return found

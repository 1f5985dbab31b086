"""The Kinesis demo's processor (``processing.processor: tools.demo.delivery_log:DeliveryLog``): every
user record it is handed is recorded durably before the batch returns, so the demo's verdict can be
computed from what was delivered, in the order it was delivered.

Each worker process appends JSON lines (shard, sequence and sub-sequence numbers, partition key, the
load's per-key counter, when) to ``<destination>/<pid>.jsonl`` and fsyncs them once per batch: a
record is checkpointed only after it is on disk, so a SIGKILL can lose no delivery from the record.

A redelivery (a record at or below the highest position already recorded for its shard, by any
worker) is said in the log as ``delivery log: N record(s) of shard S delivered before``, which the
demo's judge (events.py) attributes to a cause as it does the changelog sink's "already landed".
Each shard's highest recorded position is kept in ``<destination>/high-water/<shard>`` under an
exclusive lock; it is raised before the records are written, so a worker killed in between leaves
a mark above what is on disk (its batch is not checkpointed: the next owner delivers it again and
says so) and never records on disk what the mark does not cover: no redelivery goes unsaid.

It checks ``batch.lease_held()`` just before it records, under the shard's lock, as the processing
API asks of a handler with a side effect: a worker frozen (SIGSTOP) while it read or handled a batch
wakes up fenced, and recording the batch then would land it after the next owner had taken the
shard, where the demo's judge would blame that owner's predecessor for the redelivery. It raises
``HandlerStoppedError`` instead, and the next owner delivers the batch. A graceful stop keeps
``lease_held()`` true: the batch in flight is recorded and checkpointed.

With ``delay_millis`` (chaos), every ``every``-th batch of this process sleeps that long after it is
recorded and before it returns (said first, in the slow changelog's words): a batch is still in flight,
its records delivered but not checkpointed, while workers are killed, paused and leases move.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path

from consumer.processing import Batch, HandlerStoppedError
from consumer.records import KinesisStreamRecord
from ground.positions import ordinal

log = logging.getLogger("tools.demo.delivery_log")
HIGH_WATER = "high-water"


class DeliveryLog:
    def __init__(self, destination: str, delay_millis: int | str = 0, every: int | str = 25) -> None:
        self._dir = Path(destination)
        (self._dir / HIGH_WATER).mkdir(parents=True, exist_ok=True)
        self._out = self._dir / f"{os.getpid()}.jsonl"
        self._delay = int(delay_millis) / 1000
        self._every = max(1, int(every))
        self._batches = 0

    def handle(self, batch: Batch) -> None:
        if not batch.records:
            return
        self._batches += 1
        slow = bool(self._delay) and self._batches % self._every == 0
        if slow:  # said first, so the demo's judge knows a batch was in flight this long (events.py)
            log.info("slow changelog: shard %s: a batch sleeps %d ms", batch.shard_id, self._delay * 1000)
        at = time.time()
        lines: list[str] = []
        highest = -1
        for record in batch.records:
            if not isinstance(record, KinesisStreamRecord):
                raise TypeError(f"the delivery log records Kinesis user records, not {type(record).__name__}")
            position = ordinal(record.position)
            highest = max(highest, position)
            body = json.loads(record.data)
            lines.append(
                json.dumps(
                    {
                        "shard": batch.shard_id,
                        "position": position,
                        "key": record.partition_key,
                        "n": body["n"],
                        "at": at,
                    }
                )
            )
        with (self._dir / HIGH_WATER / batch.shard_id).open("a+", encoding="utf-8") as mark:
            fcntl.flock(mark, fcntl.LOCK_EX)  # one writer of a shard's mark at a time
            if not batch.lease_held():  # lost or fenced: the next owner delivers these (module docstring)
                raise HandlerStoppedError(
                    f"shard {batch.shard_id}: stopping before recording {len(lines)} records"
                )
            mark.seek(0)
            text = mark.read().strip()
            before = int(text) if text else -1
            again = sum(1 for record in batch.records if ordinal(record.position) <= before)
            if again:
                log.info("delivery log: %d record(s) of shard %s delivered before", again, batch.shard_id)
            if highest > before:
                mark.seek(0)
                mark.truncate()
                mark.write(str(highest))
                mark.flush()
                os.fsync(mark.fileno())
            with self._out.open("a", encoding="utf-8") as out:
                out.write("".join(f"{line}\n" for line in lines))
                out.flush()
                os.fsync(out.fileno())
        if slow:  # recorded, not yet returned: a kill or a lost lease now means a redelivery
            time.sleep(self._delay)

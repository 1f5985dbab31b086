"""Fakes for driving the lifecycle without AWS: a stream in memory and a recording processor."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from consumer.lifecycle.ports import Checkpointer, Fetched, ReadError
from consumer.records import ShardInfo, StreamRecord


def record(shard: str, seq: int, key: str = "k") -> StreamRecord:
    raw = {
        "eventID": f"{shard}-{seq}",
        "eventName": "MODIFY",
        "dynamodb": {
            "SequenceNumber": str(seq).rjust(21, "0"),
            "Keys": {"pk": {"S": key}},
            "NewImage": {"pk": {"S": key}, "n": {"N": str(seq)}},
            "SizeBytes": 40,
            "ApproximateCreationDateTime": 1_700_000_000.0,
        },
    }
    return StreamRecord(raw, shard)


@dataclass
class FakeStream:
    """Shards as lists of records; an iterator is "<shard>|<index of the next record>"."""

    shards: dict[str, list[StreamRecord]] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    faults: dict[str, list[ReadError]] = field(default_factory=lambda: defaultdict(list))
    fetches: int = 0
    iterator_faults: dict[str, list[ReadError]] = field(default_factory=lambda: defaultdict(list))

    def add(self, shard: str, first: int, count: int, *, closed: bool = True, key: str = "k") -> None:
        self.shards[shard] = [record(shard, first + 10 * i, key) for i in range(count)]
        if closed:
            self.closed.add(shard)

    def iterator_at(self, shard_id: str, position: str) -> str:
        if self.iterator_faults[shard_id]:
            raise self.iterator_faults[shard_id].pop(0)
        records = self.shards[shard_id]
        if position == "TRIM_HORIZON":
            index = 0
        elif position == "LATEST":
            index = len(records)
        else:
            index = sum(1 for r in records if int(r.sequence_number) <= int(position))
        return f"{shard_id}|{index}"

    def fetch(self, shard_id: str, iterator: str, limit: int) -> Fetched:
        self.fetches += 1
        shard, _, index_text = iterator.partition("|")
        if self.faults[shard]:
            raise self.faults[shard].pop(0)
        index = int(index_text)
        batch = tuple(self.shards[shard][index : index + limit])
        end = index + len(batch)
        done = shard in self.closed and end >= len(self.shards[shard])
        return Fetched(batch, None if done else f"{shard}|{end}", 0)


@dataclass
class RecordingProcessor:
    """Checkpoints after every batch; ``fail`` decides, per call, whether to raise instead."""

    shard: ShardInfo | None = None
    seen: list[str] = field(default_factory=list)
    calls: int = 0
    events: list[str] = field(default_factory=list)
    fail: Callable[[int, tuple[StreamRecord, ...]], bool] = lambda call, records: False

    def initialize(self, shard: ShardInfo, checkpoint: str) -> None:
        self.shard = shard
        self.events.append(f"initialize@{checkpoint}")

    def process(
        self,
        records: tuple[StreamRecord, ...],
        millis_behind_latest: int,
        checkpointer: Checkpointer,
        should_stop: Callable[[], bool],
        lease_held: Callable[[], bool] | None = None,
    ) -> None:
        self.calls += 1
        if self.fail(self.calls, records):
            raise RuntimeError(f"injected failure on call {self.calls}")
        self.seen.extend(r.sequence_number for r in records)
        if records:
            checkpointer.checkpoint()

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self.events.append("shard_ended")
        checkpointer.checkpoint()

    def lease_lost(self) -> None:
        self.events.append("lease_lost")

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.events.append("shutdown_requested")
        checkpointer.checkpoint()

"""Fakes for driving the lifecycle without AWS: a stream in memory, a recording processor and a
lease port that fails on cue."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from consumer.leases.model import Lease
from consumer.lifecycle.ports import LeaseOps
from consumer.processing.api import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.records import ShardInfo, StreamRecord
from consumer.streams.errors import StreamSourceError
from consumer.streams.source import GetRecordsResult


def _faults() -> defaultdict[str, list[Exception]]:
    return defaultdict(list)


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
    faults: dict[str, list[StreamSourceError]] = field(default_factory=lambda: defaultdict(list))
    fetches: int = 0
    iterator_faults: dict[str, list[StreamSourceError]] = field(default_factory=lambda: defaultdict(list))

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
        else:  # records with a malformed sequence number have no position: they are not counted
            numbers = [r.raw["dynamodb"].get("SequenceNumber", "") for r in records]
            index = sum(1 for n in numbers if n.isdigit() and int(n) <= int(position))
        return f"{shard_id}|{index}"

    def most_records_per_read(self, shard_id: str) -> int:
        return 1000  # DynamoDB Streams'

    def fetch(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        self.fetches += 1
        shard, _, index_text = iterator.partition("|")
        if self.faults[shard]:
            raise self.faults[shard].pop(0)
        index = int(index_text)
        batch = tuple(self.shards[shard][index : index + limit])
        end = index + len(batch)
        done = shard in self.closed and end >= len(self.shards[shard])
        return GetRecordsResult(batch, None if done else f"{shard}|{end}", 0)


def malformed(shard: str, seq: int, sequence_number: str = "not-a-number") -> StreamRecord:
    """A record like :func:`record` whose SequenceNumber is not digits."""
    bad = record(shard, seq)
    bad.raw["dynamodb"]["SequenceNumber"] = sequence_number
    return bad


@dataclass
class RecordingProcessor:
    """Checkpoints after every batch; ``fail`` decides, per call, whether to raise instead.

    ``faults[method]``: errors the next calls of ``initialize``/``lease_lost``/``shard_ended``/
    ``shutdown_requested`` raise, in order (each call is recorded in ``events`` either way).
    """

    shard: ShardInfo | None = None
    seen: list[str] = field(default_factory=list)
    calls: int = 0
    events: list[str] = field(default_factory=list)
    fail: Callable[[int, tuple[StreamRecord, ...]], bool] = lambda call, records: False
    faults: defaultdict[str, list[Exception]] = field(default_factory=_faults)
    checkpoint_in_process: bool = True  # False: progress is checkpointed only when told to stop

    def _maybe_fail(self, method: str) -> None:
        if self.faults[method]:
            raise self.faults[method].pop(0)

    def initialize(self, initialization: InitializationInput) -> None:
        self.events.append(f"initialize@{initialization.checkpoint}")
        self._maybe_fail("initialize")
        self.shard = initialization.shard

    def process_records(self, process: ProcessRecordsInput) -> None:
        self.calls += 1
        records = process.records
        if self.fail(self.calls, records):
            raise RuntimeError(f"injected failure on call {self.calls}")
        self.seen.extend(r.sequence_number for r in records)
        if records and self.checkpoint_in_process:
            process.checkpointer.checkpoint()

    def shard_ended(self, shard_ended: ShardEndedInput) -> None:
        self.events.append("shard_ended")
        self._maybe_fail("shard_ended")
        shard_ended.checkpointer.checkpoint()

    def lease_lost(self, lease_lost: LeaseLostInput) -> None:
        self.events.append("lease_lost")
        self._maybe_fail("lease_lost")

    def shutdown_requested(self, shutdown: ShutdownRequestedInput) -> None:
        self.events.append("shutdown_requested")
        self._maybe_fail("shutdown_requested")
        shutdown.checkpointer.checkpoint()


class FlakyLeases:
    """A :class:`LeaseOps` that passes every call to ``inner`` but raises ``faults[method]`` first.

    ``faults["checkpoint"] = [LeaseStoreThrottledError(...)] * 3``: the next three checkpoints are
    throttled (and not written); ``calls`` counts every call per method. Thread-safe (the scheduler
    calls it from its pool).
    """

    def __init__(self, inner: LeaseOps) -> None:
        self.inner = inner
        self.faults: defaultdict[str, list[Exception]] = _faults()
        self.calls: defaultdict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def _enter(self, method: str) -> None:
        with self._lock:
            self.calls[method] += 1
            fault = self.faults[method].pop(0) if self.faults[method] else None
        if fault is not None:
            raise fault

    def pending(self, method: str) -> int:
        with self._lock:
            return len(self.faults[method])

    def held(self) -> Sequence[Lease]:
        self._enter("held")
        return self.inner.held()

    def may_process(self, shard_id: str, counter: int | None = None) -> bool:
        self._enter("may_process")
        return self.inner.may_process(shard_id, counter)

    def handoff_requested(self, shard_id: str) -> bool:
        self._enter("handoff_requested")
        return self.inner.handoff_requested(shard_id)

    def delivering(self, shard_id: str) -> AbstractContextManager[None]:
        return self.inner.delivering(shard_id)

    def waiting_parents(self, parent_shard_ids: Sequence[str]) -> tuple[str, ...]:
        self._enter("waiting_parents")
        return self.inner.waiting_parents(parent_shard_ids)

    def checkpoint(self, shard_id: str, position: str, counter: int | None = None) -> None:
        self._enter("checkpoint")
        self.inner.checkpoint(shard_id, position, counter)

    def release(self, shard_id: str, counter: int | None = None) -> None:
        self._enter("release")
        self.inner.release(shard_id, counter)

    def give_up_stalled(self, shard_id: str, counter: int | None = None) -> None:
        self._enter("release")
        self.inner.give_up_stalled(shard_id, counter)

    def ask_stuck_calls(self, stuck: Callable[[], frozenset[str]]) -> None:
        self.inner.ask_stuck_calls(stuck)

    def shards_with_children(self) -> frozenset[str]:
        return self.inner.shards_with_children()

"""Records, handlers and a watching checkpointer for the processing tests."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from consumer.processing import Batch, BatchResult, InMemoryCheckpointer
from consumer.records import StreamRecord

SHARD = "shardId-00000001"
CREATED = 1_700_000_000.0  # the FakeClock's default start, in seconds


def record(
    seq: int,
    *,
    event: str = "INSERT",
    key: str | None = None,
    image: dict[str, Any] | None = None,
    created: float = CREATED,
    shard: str = SHARD,
) -> StreamRecord:
    keys = {"pk": {"S": key or f"item-{seq % 7}"}}
    body: dict[str, Any] = {
        "Keys": keys,
        "SequenceNumber": str(seq).zfill(21),
        "SizeBytes": 40,
        "ApproximateCreationDateTime": created,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if event != "REMOVE":
        body["NewImage"] = {
            **keys,
            "n": {"N": str(seq)},
            "blob": {"B": base64.b64encode(f"b{seq}".encode()).decode()},
            **(image or {}),
        }
    return StreamRecord({"eventID": f"e{seq}", "eventName": event, "dynamodb": body}, shard)


def records(first: int, last: int, **kwargs: Any) -> tuple[StreamRecord, ...]:
    return tuple(record(s, **kwargs) for s in range(first, last + 1))


class TransientError(Exception):
    """A transient failure."""


class PoisonError(Exception):
    """The failure of a record that never succeeds."""


class ScriptedHandler:
    """Fails every ``every``-th call and on any batch containing a poison sequence number."""

    def __init__(
        self,
        *,
        every: int = 0,
        poison: set[int] | frozenset[int] = frozenset(),
        poison_error: type[Exception] = PoisonError,
        on_call: Callable[[Batch], None] | None = None,
    ) -> None:
        self.every = every
        self.poison = set(poison)
        self.poison_error = poison_error
        self.on_call = on_call
        self.calls = 0
        self.succeeded: list[int] = []

    def __call__(self, batch: Batch) -> BatchResult | None:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(batch)
        if self.every and self.calls % self.every == 0:
            raise TransientError(f"call {self.calls} fails")
        bad = [r for r in batch.records if int(r.sequence_number) in self.poison]
        if bad:
            raise self.poison_error(f"cannot take record {int(bad[0].sequence_number)}")
        self.succeeded.extend(int(r.sequence_number) for r in batch.records)
        return None


class WatchingCheckpointer(InMemoryCheckpointer):
    """Fails the test the moment a checkpoint passes a record that is not finished."""

    def __init__(self, finished: Callable[[], set[int]]) -> None:
        super().__init__(SHARD)
        self._finished = finished
        self.delivered_all: list[int] = []

    def deliver(self, batch: tuple[StreamRecord, ...]) -> None:
        self.delivered_all.extend(int(r.sequence_number) for r in batch)
        if batch:
            self.delivered(batch[-1].sequence_number)

    def checkpoint(self, sequence_number: str | None = None) -> None:
        target = int(sequence_number or self.largest_delivered or 0)
        done = self._finished()
        ahead = [s for s in self.delivered_all if s <= target and s not in done]
        assert not ahead, f"checkpoint {target} is ahead of unfinished records {ahead}"
        super().checkpoint(sequence_number)

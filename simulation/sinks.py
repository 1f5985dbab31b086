"""Where the processors write, under the fault model: an S3 bucket (the change-log sink's objects, the
dead letters) and the tumbling windows' state store.

:class:`Bucket` is the shared bucket and its history (every object put, by whom and when).
:class:`FaultyS3` is one worker's S3 client — the two calls the product makes, ``put_object`` and the
``list_objects_v2`` paginator — through the fault model: every call takes time (a put commits inside
it, the answer comes at its end, later if the process is paused meanwhile), may be refused (503
SlowDown), and a put may land and still fail (a 500 after the commit, a timeout): the product's
change-log sink and S3 dead letter run against it as against boto3's client.
:class:`FaultyWindowStates` is the window-state table's twin: the in-memory store behind calls that
take time and are sometimes throttled.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from consumer.processing.window_state import InMemoryWindowStateStore, SavedWindow
from simulation.faults import FaultyStore
from simulation.kernel import Kernel

BUCKET = "sim"
CHANGELOG = f"s3://{BUCKET}/changelog"
DEAD_LETTERS = f"s3://{BUCKET}/dead-letters"


@dataclass
class SinkFaults:
    latency_millis: int = 0
    tail_probability: float = 0.0
    tail_millis: int = 0
    refuse_rate: float = 0.0  # 503 SlowDown: nothing written
    ambiguous_rate: float = 0.0  # written, then answered 500 or timed out
    active: bool = True

    @classmethod
    def real_world(cls, rng: random.Random, failover_millis: int) -> SinkFaults:
        return cls(
            latency_millis=rng.randint(2, 40),
            tail_probability=rng.choice((0.0, 0.02, 0.05)),
            tail_millis=rng.randint(failover_millis // 10, failover_millis // 2),
            refuse_rate=rng.choice((0.0, 0.03, 0.1)),
            ambiguous_rate=rng.choice((0.0, 0.03, 0.1)),
        )


@dataclass(frozen=True)
class Put:
    at: int
    worker: str
    key: str
    body: bytes


@dataclass
class Bucket:
    objects: dict[str, bytes] = field(default_factory=dict)
    puts: list[Put] = field(default_factory=list)

    def under(self, prefix: str) -> dict[str, bytes]:
        return {key: body for key, body in self.objects.items() if key.startswith(prefix)}

    def dead_lettered(self) -> set[tuple[str, int]]:
        """(shard, sequence number) of every record in a dead letter."""
        found = set()
        for body in self.under("dead-letters/").values():
            document = orjson.loads(body)
            for raw in document["records"]:
                found.add((document["shardId"], int(raw["dynamodb"]["SequenceNumber"])))
        return found


class SinkError(Exception):
    """What botocore raises for a refused or failed call (the sink and the dead letter wrap it)."""


class _Faulty:
    def __init__(self, kernel: Kernel, faults: SinkFaults, rng: random.Random) -> None:
        self.kernel, self.faults, self.rng = kernel, faults, rng
        self.injected = {"refused": 0, "landed_then_failed": 0}

    def _latency(self) -> tuple[int, int]:
        f = self.faults
        if not f.active:
            return 0, 0
        base = int(self.rng.expovariate(1 / f.latency_millis)) if f.latency_millis else 0
        if f.tail_millis and self.rng.random() < f.tail_probability:
            base += self.rng.randint(f.tail_millis // 4, f.tail_millis)
        before = self.rng.randint(0, base) if base else 0
        return before, base - before

    def call(self, name: str, act: Any, *, write: bool) -> Any:
        before, after = self._latency()
        self.kernel.sleep(before, through_pause=True)
        roll = self.rng.random() if self.faults.active else 1.0
        if roll < self.faults.refuse_rate:
            self.injected["refused"] += 1
            self.kernel.sleep(after)
            raise SinkError(f"{name}: SlowDown (fault model)")
        result = act()
        self.kernel.sleep(after)
        if write and roll < self.faults.refuse_rate + self.faults.ambiguous_rate:
            self.injected["landed_then_failed"] += 1
            raise SinkError(f"{name}: InternalError after the write landed (fault model)")
        return result


class _Paginator:
    def __init__(self, s3: FaultyS3) -> None:
        self._s3 = s3

    def paginate(self, *, Bucket: str, Prefix: str) -> Iterator[dict[str, Any]]:  # noqa: N803 - boto3's
        keys = self._s3.call("ListObjectsV2", lambda: sorted(self._s3.bucket.under(Prefix)), write=False)
        yield {"Contents": [{"Key": key} for key in keys]}


class FaultyS3(_Faulty):
    """One worker's S3 client: ``put_object`` and ``get_paginator("list_objects_v2")``."""

    def __init__(
        self, bucket: Bucket, kernel: Kernel, faults: SinkFaults, rng: random.Random, worker: str
    ) -> None:
        super().__init__(kernel, faults, rng)
        self.bucket, self.worker = bucket, worker

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **_: Any) -> dict[str, Any]:  # noqa: N803
        def land() -> dict[str, Any]:
            self.bucket.objects[Key] = Body
            self.bucket.puts.append(Put(self.kernel.now, self.worker, Key, Body))
            return {}

        return dict(self.call("PutObject", land, write=True))

    def get_paginator(self, name: str) -> _Paginator:
        assert name == "list_objects_v2", name
        return _Paginator(self)


class WindowStateThrottledError(Exception):
    """The window-state table refused a call (ProvisionedThroughputExceeded after retries)."""


class FaultyWindowStates(_Faulty):
    """The window-state table as one worker reaches it (:class:`WindowStateStore`). A directed fault
    of the history's script (read through ``script``, the worker's leases connection) may refuse a
    call, or stop the process when its answer arrives."""

    def __init__(
        self,
        store: InMemoryWindowStateStore,
        kernel: Kernel,
        faults: SinkFaults,
        rng: random.Random,
        script: FaultyStore | None = None,
    ) -> None:
        super().__init__(kernel, faults, rng)
        self.store = store
        self.script = script

    def call(self, name: str, act: Any, *, write: bool) -> Any:
        fault = self.script.directed(name) if self.script is not None else None
        if self.script is not None:
            self.script.stop_before_send(fault)
        if fault is not None and fault.throttle:
            self.kernel.sleep(0)
            raise WindowStateThrottledError(f"{name}: ProvisionedThroughputExceeded (directed fault)")
        try:
            result = super().call(name, act, write=write)
        except SinkError as exc:
            raise WindowStateThrottledError(str(exc)) from exc
        if fault is not None and self.script is not None:
            self.script.answered(fault)
        return result

    def save(self, shard_id: str, saved: SavedWindow) -> None:
        self.call("PutItem", lambda: self.store.save(shard_id, saved), write=True)

    def load(self, shard_id: str, sequence_number: str) -> SavedWindow | None:
        found: SavedWindow | None = self.call(
            "GetItem", lambda: self.store.load(shard_id, sequence_number), write=False
        )
        return found

    def versions(self, shard_id: str) -> list[str]:
        found: list[str] = self.call("Query", lambda: self.store.versions(shard_id), write=False)
        return found

    def delete(self, shard_id: str, sequence_numbers: Sequence[str]) -> None:
        self.call("DeleteItem", lambda: self.store.delete(shard_id, sequence_numbers), write=True)

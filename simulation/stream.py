"""The stream under the fault model: a lineage of shards with real records, read through the product's
own :class:`~consumer.streams.reader.ShardReader` over a :class:`FaultyStreamSource`.

:class:`SimStream` is DynamoDB Streams as the fleet shares it: shards born and closed over time
(roots that roll over to one child or split in two, generation after generation), records written at
seeded times, each a change of one item — an item's key stays with its shard's lineage (a split sends
each key to one child), so an item's changes are ordered across parents and children by their
version — with sequence numbers that grow in write order (a child's above its parent's). Records
older than the history's retention are trimmed, and a closed shard whose records are all trimmed is
gone from the stream (GetShardIterator: ResourceNotFound).

:class:`FaultyStreamSource` is one worker's connection to it (the
:class:`~consumer.streams.source.StreamSource` port): every call takes time (a long tail; a process
paused meanwhile gets its answer late), may be throttled (``ThrottledError``), may fail with a 500
(``TransientStreamError``); an iterator is refused as expired when it is older than the history's
iterator lifetime or at random; DescribeStream answers from a view of the stream up to
``listing_lag_millis`` old (eventually consistent). Directed faults of the history's script reach
``list_shards`` as they always did (tests/simulation/test_directed.py).
"""

from __future__ import annotations

import bisect
import random
import zlib
from dataclasses import dataclass, field, replace

from consumer.records import StreamRecord, WireRecord
from consumer.streams.errors import (
    ExpiredIteratorError,
    ShardNotFoundError,
    ThrottledError,
    TransientStreamError,
    TrimmedDataError,
)
from consumer.streams.source import GetRecordsResult, Position, Shard, StreamDescription
from simulation.faults import FaultyStore
from simulation.kernel import Kernel

ARN = "arn:aws:dynamodb:us-east-1:000000000000:table/orders/stream/sim"


@dataclass(frozen=True)
class ShardSpec:
    shard_id: str
    parent: str | None
    born: int
    closes: int
    length: int  # records written over the shard's life
    adjacent: str | None = None  # a Kinesis merge's second parent (AdjacentParentShardId)


def lineage(rng: random.Random, start: int, roots: int = 3, generations: int = 3) -> dict[str, ShardSpec]:
    """Roots that roll over (one child) or split (two children) ``generations`` times."""
    shards: dict[str, ShardSpec] = {}
    counter = 0

    def add(parent: str | None, born: int, depth: int) -> None:
        nonlocal counter
        counter += 1
        shard_id = f"shardId-{counter:04d}"
        life = rng.randint(8_000, 30_000)
        shards[shard_id] = ShardSpec(shard_id, parent, born, born + life, rng.randint(5, 40))
        if depth + 1 < generations:
            for _ in range(2 if rng.random() < 0.3 else 1):
                add(shard_id, born + life, depth + 1)

    for _ in range(roots):
        add(None, start, 0)
    return shards


def with_merges(shards: dict[str, ShardSpec], rng: random.Random, share: float = 0.7) -> dict[str, ShardSpec]:
    """Kinesis lineage over ``shards``: shards with no children paired up, and about ``share`` of the
    pairs merged (MergeShards) -- both parents close at once and one child inherits both their items,
    so it must start only once both are finished. ``rng`` is the merges' own: a lineage drawn for a
    seed stays what it was."""
    merged = dict(shards)
    parents = {spec.parent for spec in shards.values()}
    leaves = [shard_id for shard_id in shards if shard_id not in parents]
    rng.shuffle(leaves)
    counter = len(shards)
    for first, second in zip(leaves[::2], leaves[1::2], strict=False):
        if rng.random() >= share:
            continue
        closes = max(shards[first].closes, shards[second].closes)
        for shard_id in (first, second):
            merged[shard_id] = replace(shards[shard_id], closes=closes)
        counter += 1
        child = f"shardId-{counter:04d}"
        merged[child] = ShardSpec(
            child, first, closes, closes + rng.randint(8_000, 30_000), rng.randint(5, 40), adjacent=second
        )
    return merged


@dataclass(frozen=True)
class Written:
    """One change as the table wrote it: the item's ``version`` counts its changes in write order."""

    shard_id: str
    index: int
    sequence_number: int
    at: int
    key: str
    version: int


@dataclass
class StreamFaults:
    latency_millis: int = 0
    tail_probability: float = 0.0
    tail_millis: int = 0
    throttle_rate: float = 0.0
    error_rate: float = 0.0  # 500s that outlived botocore's retries
    expire_rate: float = 0.0  # an iterator refused as expired before its time
    iterator_life_millis: int = 15 * 60_000
    retention_millis: int | None = None  # None: nothing is trimmed within a history
    listing_lag_millis: int = 1_000
    active: bool = True

    @classmethod
    def real_world(cls, rng: random.Random, failover_millis: int) -> StreamFaults:
        return cls(
            latency_millis=rng.randint(2, 30),
            tail_probability=rng.choice((0.0, 0.01, 0.05)),
            tail_millis=rng.randint(failover_millis // 10, failover_millis // 2),
            throttle_rate=rng.choice((0.0, 0.05, 0.15)),
            error_rate=rng.choice((0.0, 0.02, 0.08)),
            expire_rate=rng.choice((0.0, 0.02)),
            iterator_life_millis=rng.choice((15 * 60_000, 20_000, 5_000)),
            retention_millis=rng.choice((None, None, None, 45_000, 90_000)),
        )


@dataclass
class SimStream:
    """The stream every worker reads: shards, their records, what is trimmed."""

    kernel: Kernel
    shards: dict[str, ShardSpec]
    rng: random.Random
    keys_per_root: int = 6
    retention_millis: int | None = None
    records: dict[str, list[StreamRecord]] = field(default_factory=dict)
    written: dict[str, list[Written]] = field(default_factory=dict)
    _times: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = self._keys()
        events = sorted(
            (spec.born + (spec.closes - spec.born) * (i + 1) // (spec.length + 1), shard_id, i)
            for shard_id, spec in self.shards.items()
            for i in range(spec.length)
        )
        versions: dict[str, int] = {}
        for number, (at, shard_id, index) in enumerate(events):
            key = self.rng.choice(keys[shard_id])
            versions[key] = versions.get(key, 0) + 1
            written = Written(shard_id, index, 1_000 + 10 * number, at, key, versions[key])
            self.written.setdefault(shard_id, []).append(written)
            self.records.setdefault(shard_id, []).append(self._record(written))
        for shard_id in self.shards:
            self.written.setdefault(shard_id, [])
            self.records.setdefault(shard_id, [])
            self._times[shard_id] = [w.at for w in self.written[shard_id]]

    def _keys(self) -> dict[str, list[str]]:
        """Each root's items; a rollover keeps them, a split sends each item to one child."""
        keys: dict[str, list[str]] = {}
        children: dict[str, list[str]] = {}
        for shard_id, spec in self.shards.items():
            if spec.parent is not None and spec.adjacent is None:
                children.setdefault(spec.parent, []).append(shard_id)
        for shard_id, spec in self.shards.items():
            if spec.parent is None:
                keys[shard_id] = [f"{shard_id}-item{j}" for j in range(self.keys_per_root)]
        for shard_id in self.shards:  # parents come before children in the lineage's order
            siblings = children.get(shard_id, [])
            for i, child in enumerate(siblings):
                mine = [k for k in keys[shard_id] if zlib.crc32(k.encode()) % len(siblings) == i]
                keys[child] = mine or [f"{child}-item0"]
            spec = self.shards[shard_id]
            if spec.parent is not None and spec.adjacent is not None:  # a merge: both parents' items
                keys[shard_id] = keys[spec.parent] + keys[spec.adjacent]
        return keys

    def _record(self, written: Written) -> StreamRecord:
        raw = {
            "eventID": f"{written.shard_id}-{written.index}",
            "eventName": "INSERT" if written.version == 1 else "MODIFY",
            "eventSource": "aws:dynamodb",
            "dynamodb": {
                "ApproximateCreationDateTime": written.at / 1000,
                "Keys": {"pk": {"S": written.key}},
                "NewImage": {"pk": {"S": written.key}, "v": {"N": str(written.version)}},
                "SequenceNumber": str(written.sequence_number).zfill(21),
                "SizeBytes": 40,
                "StreamViewType": "NEW_IMAGE",
            },
        }
        return WireRecord.from_parsed(raw, written.shard_id)

    # ------------------------------------------------------------------------- the service

    def trim_horizon(self, shard_id: str, now: int) -> int:
        """Index of the first record not trimmed at ``now``."""
        if self.retention_millis is None:
            return 0
        return bisect.bisect_left(self._times[shard_id], now - self.retention_millis)

    def trimmed_at(self, written: Written) -> int | None:
        """When the record was trimmed (None: never, within a history)."""
        return None if self.retention_millis is None else written.at + self.retention_millis

    def gone(self, shard_id: str, now: int) -> bool:
        """Closed and every record trimmed: DynamoDB no longer lists it or reads it."""
        spec = self.shards[shard_id]
        if self.retention_millis is None or now < spec.closes:
            return False
        return now - spec.closes > self.retention_millis

    def available(self, shard_id: str, now: int) -> int:
        return bisect.bisect_right(self._times[shard_id], now)

    def listing(self, seen: int, now: int) -> tuple[Shard, ...]:
        shards = []
        for spec in self.shards.values():
            if spec.born > seen or self.gone(spec.shard_id, now):
                continue
            records = self.written[spec.shard_id]
            first = str(records[0].sequence_number) if records else "0"
            ending = str(records[-1].sequence_number if records else 0) if spec.closes <= seen else None
            shards.append(Shard(spec.shard_id, spec.parent, first, ending, spec.adjacent))
        return tuple(shards)

    def iterator(self, shard_id: str, position: Position, now: int) -> str:
        spec = self.shards.get(shard_id)
        if spec is None or spec.born > now or self.gone(shard_id, now):
            raise ShardNotFoundError(f"ResourceNotFoundException: shard {shard_id}")
        horizon = self.trim_horizon(shard_id, now)
        if position.type == "TRIM_HORIZON":
            index = horizon
        elif position.type == "LATEST":
            index = self.available(shard_id, now)
        else:
            assert position.sequence_number is not None
            numbers = [w.sequence_number for w in self.written[shard_id]]
            number = int(position.sequence_number)
            index = bisect.bisect_right(numbers, number)
            if position.type == "AT_SEQUENCE_NUMBER":
                index = bisect.bisect_left(numbers, number)
            if index < horizon:
                raise TrimmedDataError(f"TrimmedDataAccessException: {shard_id} after {number}")
        return f"{shard_id}/{index}/{now}"

    def read(self, iterator: str, limit: int, now: int, iterator_life_millis: int) -> GetRecordsResult:
        shard_id, index_text, issued_text = iterator.split("/")
        index, issued = int(index_text), int(issued_text)
        if now - issued > iterator_life_millis:
            raise ExpiredIteratorError(f"ExpiredIteratorException: {shard_id} iterator from {issued}")
        if self.gone(shard_id, now):
            raise ShardNotFoundError(f"ResourceNotFoundException: shard {shard_id}")
        if index < self.trim_horizon(shard_id, now):
            raise TrimmedDataError(f"TrimmedDataAccessException: {shard_id} at index {index}")
        available = self.available(shard_id, now)
        records = tuple(self.records[shard_id][index : min(index + limit, available)])
        end = index + len(records)
        spec = self.shards[shard_id]
        if now >= spec.closes and end >= spec.length:
            return GetRecordsResult(records, None, 0)
        behind = 0 if end >= available else now - self.written[shard_id][end].at
        return GetRecordsResult(records, f"{shard_id}/{end}/{now}", behind)


class FaultyStreamSource:
    """One worker's DynamoDB Streams client (:class:`~consumer.streams.source.StreamSource`)."""

    def __init__(
        self, stream: SimStream, kernel: Kernel, faults: StreamFaults, rng: random.Random, store: FaultyStore
    ) -> None:
        self.stream, self.kernel, self.faults, self.rng = stream, kernel, faults, rng
        self.store = store  # the worker's leases connection: its directed-fault script and its stops
        self.injected: dict[str, int] = {"throttled": 0, "failed": 0, "expired": 0}

    def _call(self, name: str) -> None:
        """The request's way out: latency before the server acts (the server acts even if the process
        is paused meanwhile) and a throttle or a 500 drawn."""
        f = self.faults
        if not f.active:
            self.kernel.sleep(0)
            return
        latency = int(self.rng.expovariate(1 / f.latency_millis)) if f.latency_millis else 0
        if f.tail_millis and self.rng.random() < f.tail_probability:
            latency += self.rng.randint(f.tail_millis // 4, f.tail_millis)
        self.kernel.sleep(latency, through_pause=True)
        roll = self.rng.random()
        if roll < f.throttle_rate:
            self.injected["throttled"] += 1
            self.kernel.sleep(0)
            raise ThrottledError(f"{name}: LimitExceededException (fault model)")
        if roll < f.throttle_rate + f.error_rate:
            self.injected["failed"] += 1
            self.kernel.sleep(0)
            raise TransientStreamError(f"{name}: InternalServerError (fault model)")

    def _answered(self) -> None:
        self.kernel.sleep(self.rng.randint(0, 5))  # the answer travels back; a paused process waits

    # ------------------------------------------------------------------------------ the port

    def find_stream(self, table_name: str) -> str:
        return ARN

    def stream_description(self, stream_arn: str) -> StreamDescription:
        shards = self.list_shards(stream_arn)
        return StreamDescription(stream_arn, "orders", "ENABLED", "NEW_IMAGE", "sim", shards)

    def list_shards(self, stream_arn: str) -> tuple[Shard, ...]:
        """DescribeStream: the listing is made when the request reaches the server, from a view up to
        ``listing_lag_millis`` old (or as old as a directed fault says)."""
        fault = self.store.directed("list_shards")
        self._call("DescribeStream")
        lag = fault.view_age_millis if fault is not None and fault.view_age_millis else None
        now = self.kernel.now
        seen = now - (lag if lag is not None else self.rng.randint(0, self.faults.listing_lag_millis))
        shards = self.stream.listing(seen, now)
        self._answered()
        self.store.answered(fault)
        return shards

    def child_shards(self, stream_arn: str, shard_id: str) -> tuple[Shard, ...]:
        self._call("DescribeStream")
        now = self.kernel.now
        seen = now - self.rng.randint(0, self.faults.listing_lag_millis)
        children = tuple(s for s in self.stream.listing(seen, now) if shard_id in s.parent_shard_ids)
        self._answered()
        return children

    def get_iterator(self, stream_arn: str, shard_id: str, position: Position) -> str:
        self._call("GetShardIterator")
        iterator = self.stream.iterator(shard_id, position, self.kernel.now)
        self._answered()
        return iterator

    def get_records(
        self, iterator: str, limit: int, shard_id: str, *, convert_images: bool = False
    ) -> GetRecordsResult:
        self._call("GetRecords")
        if self.faults.active and self.rng.random() < self.faults.expire_rate:
            self.injected["expired"] += 1
            raise ExpiredIteratorError("ExpiredIteratorException (fault model)")
        life = self.faults.iterator_life_millis if self.faults.active else 15 * 60_000
        result = self.stream.read(iterator, limit, self.kernel.now, life)
        self._answered()
        return result

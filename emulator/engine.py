"""The DynamoDB Streams engine: every stream's lineage behind one lock, and the API operations
(what a request meets before it is served is :mod:`emulator.gate`'s).

Time-driven behaviour (rollovers, scheduled splits, trimming) is applied lazily at the start of
every operation and by the server's ticker, from the injected clock, so a test with a fake clock is
fully deterministic and a real server keeps rolling while idle. Writes and reads share one lock:
the engine is small and fast next to moto, and a single lock makes "sequence numbers increase in
the order changes were applied" trivially true under concurrent clients.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from emulator import iterators
from emulator.config import EngineConfig
from emulator.errors import ControlError, StreamsApiError, not_found, validation
from emulator.faults import FaultSettings
from emulator.gate import Gate
from emulator.lineage import Shard, StreamLineage
from emulator.records import Image, TableShape, build_record, partition_hash
from ground.clock import Clock, SystemClock

MAX_RECORDS = 1000
MAX_RESPONSE_BYTES = 1024 * 1024
MAX_DESCRIBE_LIMIT = 100
ITERATOR_TYPES = ("TRIM_HORIZON", "LATEST", "AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER")
TRIM_CHECK_MS = 500


@dataclass
class Stream:
    arn: str
    label: str
    shape: TableShape
    key_schema: list[dict[str, str]]
    created_wall_ms: int
    lineage: StreamLineage
    next_split_ms: int | None


class StreamEngine:
    def __init__(self, config: EngineConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.faults = config.faults
        self._clock: Clock = clock or SystemClock()
        self._rng = random.Random(config.seed)
        self._lock = threading.RLock()
        self._streams: dict[str, Stream] = {}
        self._counters: Counter[str] = Counter()
        self._nonce = 0
        self._last_trim_ms = -TRIM_CHECK_MS
        # The gate shares the engine's lock, seeded draws and counters: one seed still gives one run.
        self.gate = Gate(self._lock, self._rng, self._counters, self._clock, lambda: self.faults)

    def register_stream(
        self, arn: str, label: str, shape: TableShape, key_schema: list[dict[str, str]]
    ) -> None:
        """Make ``arn`` known (idempotent): its K partitions each get an open shard."""
        with self._lock:
            if arn in self._streams:
                return
            now, wall = self._clock.monotonic_millis(), self._clock.wall_millis()
            lineage = StreamLineage(
                partitions=self.config.partitions,
                rollover_ms=self.config.rollover_ms,
                rng=random.Random(f"{self.config.seed}|{arn}"),
                now_ms=now,
                wall_ms=wall,
            )
            split_due = None if self.config.split_every_ms is None else now + self.config.split_every_ms
            self._streams[arn] = Stream(arn, label, shape, key_schema, wall, lineage, split_due)

    def has_stream(self, arn: str) -> bool:
        with self._lock:
            return arn in self._streams

    def record_change(
        self, arn: str, old: Image | None, new: Image | None, user_identity: dict[str, str] | None = None
    ) -> str | None:
        """Append the net change of one item; returns its sequence number, or None for a no-op."""
        with self._lock:
            self._advance()
            stream = self._streams[arn]
            wall = self._clock.wall_millis()
            record = build_record(
                stream.shape, old, new, wall_ms=wall, rng=self._rng, user_identity=user_identity
            )
            if record is None:
                self._counters["no_op_writes"] += 1
                return None
            key_hash = partition_hash(self.config.seed, record["dynamodb"]["Keys"][stream.shape.hash_key])
            size = int(record["dynamodb"]["SizeBytes"]) + 200
            now = self._clock.monotonic_millis()
            _, seq = stream.lineage.append(key_hash, record, size, now)
            record["dynamodb"]["SequenceNumber"] = str(seq)
            self._counters["records_written"] += 1
            self._counters[f"records_{record['eventName'].lower()}"] += 1
            return str(seq)

    # ------------------------------------------------------------------------- time-driven

    def tick(self) -> None:
        with self._lock:
            self._advance()

    def _advance(self) -> None:
        now, wall = self._clock.monotonic_millis(), self._clock.wall_millis()
        for stream in self._streams.values():
            lineage = stream.lineage
            for index in lineage.rollovers_due(now):
                lineage.rollover(index, now, wall)
                self._counters["rollovers"] += 1
            if stream.next_split_ms is not None and stream.next_split_ms <= now:
                self._split(stream, None, now, wall)
                stream.next_split_ms = now + (self.config.split_every_ms or 0)
        if now - self._last_trim_ms >= TRIM_CHECK_MS:
            self._last_trim_ms = now
            for stream in self._streams.values():
                self._counters["records_trimmed"] += stream.lineage.trim(now - self.config.trim_after_ms)

    def _split(self, stream: Stream, partition: int | None, now: int, wall: int) -> list[str]:
        lineage = stream.lineage
        candidates = [i for i, p in enumerate(lineage.partitions) if p.high - p.low >= 2]
        if partition is None:
            if not candidates:
                raise ControlError(f"no partition of {stream.shape.name} can split further")
            partition = self._rng.choice(candidates)
        self._check_partition(stream, partition)
        try:
            children = lineage.split(partition, now, wall)
        except ValueError as exc:
            raise ControlError(str(exc)) from exc
        self._counters["splits"] += 1
        return [child.shard_id for child in children]

    @staticmethod
    def _check_partition(stream: Stream, partition: int) -> None:
        count = len(stream.lineage.partitions)
        if not 0 <= partition < count:
            raise ControlError(f"partition must be 0..{count - 1} for {stream.shape.name}, got {partition}")

    # ------------------------------------------------------------------------ control

    def _select(self, table: str | None) -> list[Stream]:
        streams = [s for s in self._streams.values() if table is None or s.shape.name == table]
        if table is not None and not streams:
            known = sorted({s.shape.name for s in self._streams.values()})
            raise ControlError(f"no stream-enabled table named {table!r} (known: {known})")
        return streams

    def rollover(self, table: str | None = None, partition: int | None = None) -> list[str]:
        """Roll over every partition (or one) of every stream (or one table's); returns new shards."""
        with self._lock:
            self._advance()
            now, wall = self._clock.monotonic_millis(), self._clock.wall_millis()
            created: list[str] = []
            for stream in self._select(table):
                indices = range(len(stream.lineage.partitions)) if partition is None else [partition]
                for index in indices:
                    self._check_partition(stream, index)
                    created.append(stream.lineage.rollover(index, now, wall).shard_id)
                    self._counters["rollovers"] += 1
            return created

    def split(self, table: str | None = None, partition: int | None = None) -> list[str]:
        """Split one partition (seeded random when not given) of each selected stream."""
        with self._lock:
            self._advance()
            now, wall = self._clock.monotonic_millis(), self._clock.wall_millis()
            created: list[str] = []
            for stream in self._select(table):
                created.extend(self._split(stream, partition, now, wall))
            return created

    def trim(self, table: str | None = None, older_than_seconds: float = 0.0) -> int:
        """Trim records written more than ``older_than_seconds`` ago; returns how many."""
        with self._lock:
            self._advance()
            cutoff = self._clock.monotonic_millis() - int(older_than_seconds * 1000)
            dropped = sum(stream.lineage.trim(cutoff) for stream in self._select(table))
            self._counters["records_trimmed"] += dropped
            return dropped

    def set_faults(self, changes: dict[str, Any]) -> FaultSettings:
        with self._lock:
            self.faults = self.faults.updated(changes)
            return self.faults

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)

    def shard_table(self, table: str | None = None) -> list[dict[str, Any]]:
        """The true state of every shard (not the eventually consistent view), for tests and demos."""
        with self._lock:
            self._advance()
            out = []
            for stream in self._select(table):
                writing = {p.shard_id: i for i, p in enumerate(stream.lineage.partitions)}
                for shard in stream.lineage.ordered_shards():
                    out.append(
                        {
                            "table": stream.shape.name,
                            "streamArn": stream.arn,
                            "shardId": shard.shard_id,
                            "parentShardId": shard.parent_id,
                            "open": shard.is_open,
                            "removed": shard.removed,
                            "partition": writing.get(shard.shard_id),
                            "records": len(shard.seqs),
                            "lastSequenceNumber": str(shard.seqs[-1]) if shard.seqs else None,
                            "startingSequenceNumber": str(shard.start_seq),
                            "endingSequenceNumber": None if shard.end_seq is None else str(shard.end_seq),
                        }
                    )
            return out

    # ------------------------------------------------------------------------- API: reads

    def _stream(self, arn: object) -> Stream:
        if not isinstance(arn, str) or not arn:
            raise validation("StreamArn is required and must be a string")
        stream = self._streams.get(arn)
        if stream is None:
            raise not_found(f"Stream: {arn} not found")
        return stream

    def _shard(self, stream: Stream, shard_id: object) -> Shard:
        if not isinstance(shard_id, str) or not shard_id:
            raise validation("ShardId is required and must be a string")
        shard = stream.lineage.shards.get(shard_id)
        if shard is None or shard.removed:
            raise not_found(f"Shard: {shard_id} in Stream: {stream.arn}")
        return shard

    def list_streams(self, table_name: str | None, limit: int, exclusive_start: str | None) -> dict[str, Any]:
        with self._lock:
            self._advance()
            arns = sorted(
                a for a, s in self._streams.items() if table_name is None or s.shape.name == table_name
            )
            if exclusive_start is not None:
                arns = [a for a in arns if a > exclusive_start]
            page = arns[:limit]
            result: dict[str, Any] = {
                "Streams": [
                    {
                        "StreamArn": arn,
                        "TableName": self._streams[arn].shape.name,
                        "StreamLabel": self._streams[arn].label,
                    }
                    for arn in page
                ]
            }
            if len(arns) > limit:
                result["LastEvaluatedStreamArn"] = page[-1]
            return result

    def describe_stream(
        self, arn: object, limit: int, exclusive_start_shard_id: str | None, child_of: str | None
    ) -> dict[str, Any]:
        with self._lock:
            self._advance()
            stream = self._stream(arn)
            now = self._clock.monotonic_millis()
            shards = [s for s in stream.lineage.ordered_shards() if not s.removed]
            # Eventual consistency: new children appear late, and/or closes show late.
            child_delay = self.faults.child_visibility_delay_millis
            close_delay = self.faults.consistency_delay_millis
            shards = [s for s in shards if s.parent_id is None or s.created_ms + child_delay <= now]
            if child_of is not None:
                shards = [s for s in shards if s.parent_id == child_of]
            if exclusive_start_shard_id is not None:
                start = stream.lineage.shards.get(exclusive_start_shard_id)
                if start is None:
                    raise not_found(f"Shard: {exclusive_start_shard_id} in Stream: {stream.arn}")
                shards = [s for s in shards if s.ordinal > start.ordinal]
            page = shards[:limit]
            described = []
            for shard in page:
                seq_range = {"StartingSequenceNumber": str(shard.start_seq)}
                if shard.closed_ms is not None and shard.closed_ms + close_delay <= now:
                    seq_range["EndingSequenceNumber"] = str(shard.end_seq)
                item: dict[str, Any] = {"ShardId": shard.shard_id, "SequenceNumberRange": seq_range}
                if shard.parent_id is not None:
                    item["ParentShardId"] = shard.parent_id
                described.append(item)
            description: dict[str, Any] = {
                "StreamArn": stream.arn,
                "StreamLabel": stream.label,
                "StreamStatus": "ENABLED",
                "StreamViewType": stream.shape.view_type,
                "CreationRequestDateTime": stream.created_wall_ms / 1000,
                "TableName": stream.shape.name,
                "KeySchema": stream.key_schema,
                "Shards": described,
            }
            if len(shards) > limit:
                description["LastEvaluatedShardId"] = page[-1].shard_id
            return {"StreamDescription": description}

    def get_shard_iterator(
        self, arn: object, shard_id: object, iterator_type: object, sequence: object
    ) -> str:
        with self._lock:
            self._advance()
            stream = self._stream(arn)
            shard = self._shard(stream, shard_id)
            if iterator_type not in ITERATOR_TYPES:
                raise validation(
                    f"Value '{iterator_type}' at 'shardIteratorType' failed to satisfy constraint: "
                    f"Member must satisfy enum value set: [{', '.join(ITERATOR_TYPES)}]"
                )
            if iterator_type == "TRIM_HORIZON":
                after = max(shard.start_seq - 1, shard.trimmed_through)
            elif iterator_type == "LATEST":
                after = shard.last_seq() if shard.is_open else (shard.end_seq or 0)
            else:
                number = self._sequence_in(shard, sequence)
                if number <= shard.trimmed_through:
                    raise StreamsApiError(
                        "TrimmedDataAccessException",
                        f"Sequence number {number} in shard {shard.shard_id} has been trimmed "
                        "(older than the stream's retention).",
                    )
                after = number - 1 if iterator_type == "AT_SEQUENCE_NUMBER" else number
            self._counters["iterators_issued"] += 1
            return self._issue(stream.arn, shard.shard_id, after)

    @staticmethod
    def _sequence_in(shard: Shard, sequence: object) -> int:
        if not isinstance(sequence, str) or not sequence.isdigit():
            raise validation("SequenceNumber (a digit string) is required for AT_/AFTER_SEQUENCE_NUMBER")
        number = int(sequence)
        upper = shard.end_seq if shard.end_seq is not None else shard.last_seq()
        if not shard.start_seq <= number <= max(upper, shard.start_seq):
            raise validation(
                f"Invalid SequenceNumber {sequence} for shard {shard.shard_id}: outside its range "
                f"starting at {shard.start_seq}"
            )
        return number

    def _issue(self, arn: str, shard_id: str, after: int) -> str:
        self._nonce += 1
        position = iterators.IteratorPosition(arn, shard_id, after, self._clock.monotonic_millis())
        return iterators.encode(position, self._nonce)

    def get_records(self, token: object, limit: object) -> dict[str, Any]:
        if limit is None:
            limit = MAX_RECORDS
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_RECORDS:
            raise validation(
                f"1 validation error detected: Value '{limit}' at 'limit' failed to satisfy constraint: "
                f"Member must have value between 1 and {MAX_RECORDS}"
            )
        position = iterators.decode(token)
        with self._lock:
            self._advance()
            now = self._clock.monotonic_millis()
            stream = self._stream(position.stream_arn)
            shard = self._shard(stream, position.shard_id)
            age = now - position.issued_ms
            if age > self.config.iterator_expiry_ms:
                self._counters["expired_iterators"] += 1
                created = datetime.fromtimestamp((self._clock.wall_millis() - age) / 1000, UTC)
                raise StreamsApiError(
                    "ExpiredIteratorException",
                    f"Iterator expired. The iterator was created at time {created:%a %b %d %H:%M:%S UTC %Y} "
                    f"while right now it is {age} ms later, past the tolerated {self.config.iterator_expiry_ms} ms.",
                )
            if position.after_seq < shard.trimmed_through:
                self._counters["trimmed_reads"] += 1
                raise StreamsApiError(
                    "TrimmedDataAccessException",
                    f"The iterator points before the oldest record still in shard {shard.shard_id}: "
                    "records it would return have been trimmed.",
                )
            records = shard.records_after(position.after_seq, limit, MAX_RESPONSE_BYTES)
            last = int(records[-1]["dynamodb"]["SequenceNumber"]) if records else position.after_seq
            result: dict[str, Any] = {"Records": records}
            exhausted = not shard.is_open and last >= shard.last_seq()
            if not exhausted:
                result["NextShardIterator"] = self._issue(stream.arn, shard.shard_id, last)
            self._counters["records_served"] += len(records)
            return result

    def throttle_key(self, token: object) -> str | None:
        """The per-shard bucket a GetRecords call draws from (None when the iterator is garbage:
        the call then fails validation instead of being throttled)."""
        try:
            position = iterators.decode(token)
        except StreamsApiError:
            return None
        return f"{position.stream_arn}|{position.shard_id}"

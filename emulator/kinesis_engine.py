"""The emulator's Kinesis Data Streams: every stream behind one lock, and the API operations.

The operations take already-validated arguments (:mod:`emulator.kinesis_api` reads the JSON) and
return the response document or raise :class:`~emulator.errors.StreamsApiError` with Kinesis'
error codes. Time comes from the injected clock: trimming by retention happens lazily at the start
of every operation and on the server's ticker, so a test with a fake clock is deterministic.

Retention on the emulator clock: ``trim_after_seconds`` (``emulator.trim_after_seconds``) stands
for 24 hours, the default retention, and a stream's ``RetentionPeriodHours`` scales it (168 hours:
seven times as long), so a demo sees trimming within minutes while the API reports AWS's figures.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulator import iterators
from emulator.config import EngineConfig
from emulator.errors import StreamsApiError
from emulator.faults import FaultSettings, should_fail
from emulator.kinesis_limits import KinesisLimits
from emulator.kinesis_shards import KinesisShard, KinesisStreamShards, ReshardError
from ground.clock import Clock, SystemClock

ACCOUNT = "123456789012"  # moto's default account: the emulator's ARNs are all in it
MAX_GET_RECORDS = 10_000
MAX_RESPONSE_BYTES = 10 * 1024 * 1024
DEFAULT_RETENTION_HOURS = 24
MAX_RETENTION_HOURS = 8760
ON_DEMAND_SHARDS = 4  # an on-demand stream starts with four shards (it does not scale here)
TRIM_CHECK_MS = 500


def invalid(message: str) -> StreamsApiError:
    return StreamsApiError("InvalidArgumentException", message)


def not_found(message: str) -> StreamsApiError:
    return StreamsApiError("ResourceNotFoundException", message)


@dataclass
class KinesisStream:
    name: str
    arn: str
    mode: str
    retention_hours: int
    created_wall_ms: int
    shards: KinesisStreamShards


class KinesisEngine:
    def __init__(
        self,
        config: EngineConfig,
        clock: Clock | None = None,
        faults: Callable[[], FaultSettings] | None = None,
    ) -> None:
        self.config = config
        self._clock: Clock = clock or SystemClock()
        self._faults = faults or (lambda: config.faults)
        self._rng = random.Random(f"{config.seed}|kinesis")
        self._lock = threading.RLock()
        self._streams: dict[str, KinesisStream] = {}
        self._limits = KinesisLimits()
        self._nonce = 0
        self._last_trim_ms = -TRIM_CHECK_MS
        self.counters: Counter[str] = Counter()

    def now_millis(self) -> int:
        return self._clock.monotonic_millis()

    def counter_values(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counters)

    # ------------------------------------------------------------------------- time-driven

    def tick(self) -> None:
        with self._lock:
            self._advance()

    def retention_ms(self, stream: KinesisStream) -> int:
        return self.config.trim_after_ms * stream.retention_hours // DEFAULT_RETENTION_HOURS

    def horizon_wall_ms(self, stream: KinesisStream) -> int:
        """The wall time the stream's retention reaches back to (its trim horizon)."""
        return self._clock.wall_millis() - self.retention_ms(stream)

    def _advance(self) -> None:
        now = self._clock.monotonic_millis()
        if now - self._last_trim_ms < TRIM_CHECK_MS:
            return
        self._last_trim_ms = now
        for stream in self._streams.values():
            self.counters["kinesis_records_trimmed"] += stream.shards.trim(now - self.retention_ms(stream))

    def _live(self, stream: KinesisStream, shard: KinesisShard) -> bool:
        cutoff = self._clock.monotonic_millis() - self.retention_ms(stream)
        return not stream.shards.expired(shard, cutoff)

    # ------------------------------------------------------------------------------ lookup

    def stream(self, name: str | None, arn: str | None) -> KinesisStream:
        """The stream a request names by ``StreamName`` or ``StreamARN`` (both: they must agree)."""
        if name is None and arn is None:
            raise invalid("Either StreamName or StreamARN must be provided")
        if arn is not None:
            by_arn = arn.rpartition(":stream/")[2]
            if name is not None and name != by_arn:
                raise invalid(f"StreamName {name} and StreamARN {arn} name different streams")
            name = by_arn
        assert name is not None
        stream = self._streams.get(name)
        if stream is None or (arn is not None and stream.arn != arn):
            raise not_found(f"Stream {name} under account {ACCOUNT} not found.")
        return stream

    def _shard(self, stream: KinesisStream, shard_id: str) -> KinesisShard:
        shard = stream.shards.shards.get(shard_id)
        if shard is None or not self._live(stream, shard):
            raise not_found(
                f"Shard {shard_id} in stream {stream.name} under account {ACCOUNT} does not exist"
            )
        return shard

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._streams)

    # --------------------------------------------------------------------- control plane

    def create_stream(self, name: str, shard_count: int | None, mode: str, region: str) -> None:
        with self._lock:
            self._advance()
            if name in self._streams:
                raise StreamsApiError(
                    "ResourceInUseException", f"Stream {name} under account {ACCOUNT} already exists."
                )
            if mode == "PROVISIONED" and shard_count is None:
                raise invalid("ShardCount is required for a stream in PROVISIONED mode")
            count = ON_DEMAND_SHARDS if mode == "ON_DEMAND" else int(shard_count or 0)
            now, wall = self._clock.monotonic_millis(), self._clock.wall_millis()
            shards = KinesisStreamShards(
                shard_count=count, rng=random.Random(f"{self.config.seed}|{name}"), now_ms=now, wall_ms=wall
            )
            arn = f"arn:aws:kinesis:{region}:{ACCOUNT}:stream/{name}"
            self._streams[name] = KinesisStream(name, arn, mode, DEFAULT_RETENTION_HOURS, wall, shards)
            self.counters["kinesis_streams_created"] += 1

    def delete_stream(self, name: str | None, arn: str | None) -> None:
        with self._lock:
            del self._streams[self.stream(name, arn).name]

    def set_retention(self, name: str | None, arn: str | None, hours: int, increase: bool) -> None:
        with self._lock:
            stream = self.stream(name, arn)
            if not DEFAULT_RETENTION_HOURS <= hours <= MAX_RETENTION_HOURS:
                raise invalid(
                    f"RetentionPeriodHours {hours} must be between {DEFAULT_RETENTION_HOURS} and {MAX_RETENTION_HOURS}"
                )
            if increase and hours < stream.retention_hours:
                raise invalid(
                    f"Requested retention period ({hours} hours) for stream {stream.name} can not be shorter "
                    f"than existing retention period ({stream.retention_hours} hours). Use "
                    "DecreaseRetentionPeriod API."
                )
            if not increase and hours > stream.retention_hours:
                raise invalid(
                    f"Requested retention period ({hours} hours) for stream {stream.name} can not be longer "
                    f"than existing retention period ({stream.retention_hours} hours). Use "
                    "IncreaseRetentionPeriod API."
                )
            stream.retention_hours = hours
            self._last_trim_ms = -TRIM_CHECK_MS  # a shorter retention trims at the next call
            self._advance()

    def streams(self) -> list[KinesisStream]:
        with self._lock:
            self._advance()
            return [self._streams[name] for name in sorted(self._streams)]

    def open_count(self, stream: KinesisStream) -> int:
        with self._lock:
            return len(stream.shards.open_shards())

    # ------------------------------------------------------------------------ resharding

    def split_shard(
        self, name: str | None, arn: str | None, shard_id: str, new_starting_hash_key: int
    ) -> None:
        with self._lock:
            self._advance()
            stream = self.stream(name, arn)
            self._shard(stream, shard_id)
            self._reshard(lambda now, wall: stream.shards.split(shard_id, new_starting_hash_key, now, wall))
            self.counters["kinesis_splits"] += 1

    def merge_shards(self, name: str | None, arn: str | None, shard_id: str, adjacent_id: str) -> None:
        with self._lock:
            self._advance()
            stream = self.stream(name, arn)
            self._shard(stream, shard_id)
            self._shard(stream, adjacent_id)
            self._reshard(lambda now, wall: stream.shards.merge(shard_id, adjacent_id, now, wall))
            self.counters["kinesis_merges"] += 1

    def update_shard_count(self, name: str | None, arn: str | None, target: int) -> dict[str, Any]:
        with self._lock:
            self._advance()
            stream = self.stream(name, arn)
            current = len(stream.shards.open_shards())
            self._reshard(lambda now, wall: stream.shards.scale_to(target, now, wall))
            self.counters["kinesis_shard_count_updates"] += 1
            return {
                "StreamName": stream.name,
                "StreamARN": stream.arn,
                "CurrentShardCount": current,
                "TargetShardCount": target,
            }

    def _reshard(self, change: Callable[[int, int], object]) -> None:
        try:
            change(self._clock.monotonic_millis(), self._clock.wall_millis())
        except ReshardError as exc:
            raise invalid(str(exc)) from exc

    # --------------------------------------------------------------------------- writes

    def put_records(
        self, name: str | None, arn: str | None, entries: list[tuple[bytes, str, int]]
    ) -> list[dict[str, str]]:
        """Append each (data, partition key, hash key); one result per entry: ShardId and
        SequenceNumber, or ErrorCode and ErrorMessage when its shard's write limit refused it."""
        with self._lock:
            self._advance()
            stream = self.stream(name, arn)
            faults = self._faults()
            now, wall = self._clock.monotonic_millis(), self._clock.wall_millis()
            results: list[dict[str, str]] = []
            for data, partition_key, hash_key in entries:
                shard = stream.shards.shard_for(hash_key)
                size = len(data) + len(partition_key.encode())
                if not self._limits.write_allowed(f"{stream.name}|{shard.shard_id}", faults, now, size):
                    self.counters["kinesis_writes_throttled"] += 1
                    results.append(
                        {
                            "ErrorCode": "ProvisionedThroughputExceededException",
                            "ErrorMessage": f"Rate exceeded for shard {shard.shard_id} in stream {stream.name} "
                            f"under account {ACCOUNT}.",
                        }
                    )
                    continue
                seq = stream.shards.append(shard, data, partition_key, now, wall)
                self.counters["kinesis_records_written"] += 1
                results.append({"ShardId": shard.shard_id, "SequenceNumber": str(seq)})
            return results

    # ------------------------------------------------------------------------------ reads

    def list_shards(
        self, stream: KinesisStream, chosen: Callable[[KinesisShard], bool]
    ) -> list[KinesisShard]:
        """The stream's live shards that ``chosen`` keeps, in creation order (the caller pages)."""
        with self._lock:
            self._advance()
            return [s for s in stream.shards.ordered() if self._live(stream, s) and chosen(s)]

    def admit_list_shards(self, stream: KinesisStream) -> None:
        with self._lock:
            if not self._limits.list_shards_allowed(
                stream.name, self._faults(), self._clock.monotonic_millis()
            ):
                self.counters["kinesis_throttled"] += 1
                raise StreamsApiError(
                    "LimitExceededException", f"Rate exceeded for ListShards on stream {stream.name}."
                )

    def get_shard_iterator(
        self,
        stream: KinesisStream,
        shard_id: str,
        iterator_type: str,
        sequence: int | None,
        timestamp_ms: int | None,
    ) -> str:
        with self._lock:
            self._advance()
            shard = self._shard(stream, shard_id)
            now = self._clock.monotonic_millis()
            if not self._limits.iterator_allowed(f"{stream.name}|{shard_id}", now):
                self.counters["kinesis_throttled"] += 1
                raise StreamsApiError(
                    "ProvisionedThroughputExceededException",
                    f"Rate exceeded for GetShardIterator on shard {shard_id} in stream {stream.name}.",
                )
            try:
                after = shard.position(iterator_type, sequence, timestamp_ms)
            except ValueError:
                raise invalid(
                    f"StartingSequenceNumber {sequence} used in GetShardIterator on shard {shard_id} in "
                    f"stream {stream.name} under account {ACCOUNT} is invalid because it did not come "
                    "from this stream."
                ) from None
            self.counters["kinesis_iterators_issued"] += 1
            return self._issue(stream, shard_id, after)

    def _issue(self, stream: KinesisStream, shard_id: str, after: int) -> str:
        self._nonce += 1
        position = iterators.IteratorPosition(stream.arn, shard_id, after, self._clock.monotonic_millis())
        return iterators.encode(position, self._nonce)

    def _by_arn(self, arn: str) -> KinesisStream:
        stream = self._streams.get(arn.rpartition(":stream/")[2])
        if stream is None or stream.arn != arn:
            raise not_found(f"Stream {arn} under account {ACCOUNT} not found.")
        return stream

    def get_records(self, token: str, limit: int) -> dict[str, Any]:
        try:
            position = iterators.decode(token)
        except StreamsApiError as exc:
            raise invalid(exc.message) from exc
        with self._lock:
            self._advance()
            now, wall = self._clock.monotonic_millis(), self._clock.wall_millis()
            stream = self._by_arn(position.stream_arn)
            shard = stream.shards.shards.get(position.shard_id)
            if shard is None:
                raise not_found(f"Shard {position.shard_id} in stream {stream.name} does not exist")
            age = now - position.issued_ms
            if age > self.config.iterator_expiry_ms:
                self.counters["kinesis_expired_iterators"] += 1
                raise StreamsApiError(
                    "ExpiredIteratorException",
                    f"Iterator expired. The iterator was created at time {position.issued_ms} while right "
                    f"now it is {now} ({age} ms later, past the tolerated {self.config.iterator_expiry_ms} ms).",
                )
            faults = self._faults()
            key = f"{stream.name}|{shard.shard_id}"
            refused = self._limits.get_records_allowed(key, faults, now)
            if refused is not None:
                self.counters["kinesis_throttled"] += 1
                raise StreamsApiError("ProvisionedThroughputExceededException", refused)
            if position.after_seq < shard.trimmed_through:
                self.counters["kinesis_reads_from_horizon"] += 1
            taken = shard.take(shard.index_after(position.after_seq), limit, MAX_RESPONSE_BYTES)
            self._limits.charge_read(key, faults, now, sum(shard.sizes[i] for i in taken))
            records = [shard.document(i) for i in taken]
            last = shard.seqs[taken[-1]] if taken else max(position.after_seq, shard.trimmed_through)
            remaining = taken.stop < len(shard.seqs)
            behind = max(0, wall - shard.arrival_wall_ms[taken[-1]]) if taken and remaining else 0
            result: dict[str, Any] = {"Records": records, "MillisBehindLatest": behind}
            if shard.is_open or remaining:
                result["NextShardIterator"] = self._issue(stream, shard.shard_id, last)
            else:
                result["ChildShards"] = [stream.shards.shards[c].child_document() for c in shard.children]
            self.counters["kinesis_records_served"] += len(records)
            return result

    def maybe_fail(self, operation: str) -> int:
        """Count the call and inject the configured stream faults; the latency (ms) to add."""
        with self._lock:
            faults = self._faults()
            self.counters[f"kinesis_calls_{operation}"] += 1
            if should_fail(self._rng, faults.error_rate):
                self.counters["kinesis_faults_injected"] += 1
                raise StreamsApiError("InternalFailure", "Injected fault (emulator error_rate).", 500)
            return faults.latency_millis

    # --------------------------------------------------------------------------- control

    def trim(self, name: str | None, older_than_seconds: float) -> int:
        """Trim records written more than ``older_than_seconds`` ago, in one stream or all."""
        with self._lock:
            cutoff = self._clock.monotonic_millis() - int(older_than_seconds * 1000)
            chosen = [self.stream(name, None)] if name is not None else list(self._streams.values())
            dropped = sum(s.shards.trim(cutoff) for s in chosen)
            self.counters["kinesis_records_trimmed"] += dropped
            return dropped

    def shards_of(self, name: str | None) -> list[tuple[KinesisStream, KinesisShard, bool]]:
        """Every shard (expired ones included) of one stream or all, and whether it is live."""
        with self._lock:
            self._advance()
            chosen = [self.stream(name, None)] if name is not None else list(self._streams.values())
            return [
                (stream, shard, self._live(stream, shard))
                for stream in chosen
                for shard in stream.shards.ordered()
            ]

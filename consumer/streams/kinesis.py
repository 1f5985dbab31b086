"""Kinesis Data Streams adapter: a stream's summary, its shards with their lineage, iterators, and
reads whose records come out de-aggregated, through an injected boto3 ``kinesis`` client.

What differs from DynamoDB Streams, and how it is met here:

* **Lineage has two parents** after a merge (``ParentShardId`` and ``AdjacentParentShardId``): a
  :class:`KinesisShard` names all its parents, and the child starts only once every one is finished.
* **Children** are found without a listing: the last GetRecords of a closed shard names them
  (``ChildShards``), and :meth:`KinesisStreamSource.child_shards` asks ListShards only for the shards
  after the parent (``ShardFilter`` AFTER_SHARD_ID: a child is always created after its parents).
* **ListShards** pages with a ``NextToken`` valid for 300 s; an expired token restarts the listing.
* **Read limits** (5 calls/s, 2 MiB/s per shard) are a debt, paced by
  :mod:`consumer.streams.kinesis_pacing` from the moment an answer's body was received
  (:attr:`KinesisBatch.received_ms`, taken on botocore's ``before-parse`` event of this client): the
  shard charged the answer when it served it, before that moment, and the parsing that follows is the
  worker's own time, not the shard's; a refusal is :class:`ThrottledError`.
* **Records** are KPL-aggregated or not (:mod:`consumer.records.kpl`); a user record outside the
  shard's hash-key range is the KPL's re-put duplicate and is dropped as the Java KCL drops it.
* **Retention** trims silently: an iterator before the trim horizon reads from the horizon with no
  error (the service says nothing), so trimming is not reported as DynamoDB Streams' is.

Errors are the port's (:mod:`consumer.streams.errors`), each wrapping botocore's.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consumer.lease_keys import kinesis_stream_identifier
from consumer.records.kinesis_record import KinesisRecord, read_record
from consumer.records.kpl import HASH_KEY_SPACE
from consumer.streams.botocore_errors import translated
from consumer.streams.errors import (
    AccessDeniedError,
    ExpiredIteratorError,
    InvalidStreamRequestError,
    ShardNotFoundError,
    StreamFormatError,
    StreamGoneError,
    StreamNotFoundError,
    StreamSourceError,
    ThrottledError,
    TransientStreamError,
)
from consumer.streams.source import Position, Shard
from ground.clock import Clock, SystemClock
from ground.settings.source import KINESIS_MAX_RECORDS

MAX_LIMIT = KINESIS_MAX_RECORDS  # GetRecords' Limit, as the settings check worker.max_records against it
_THROTTLED = frozenset(
    {"ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException"}
)
_DENIED = frozenset({"AccessDeniedException", "UnrecognizedClientException", "ExpiredTokenException"})
_TRANSIENT = frozenset({"InternalFailure", "InternalFailureException", "ServiceUnavailable"})


@dataclass(slots=True)
class _Receipt:
    """When this thread's GetRecords answer was received, on ``clock`` (monotonic ms)."""

    clock: Clock
    at_ms: float | None = None


# Set only around this adapter's own GetRecords calls (botocore parses on the calling thread), so
# other code sharing the injected client is not timed.
_RECEIPT: ContextVar[_Receipt | None] = ContextVar("consumer_kinesis_receipt", default=None)


def _received(response_dict: Mapping[str, Any], **_: Any) -> None:
    """before-parse handler: the body of a successful answer is in; the last one (after botocore's
    retries) is the answer's."""
    receipt = _RECEIPT.get()
    if receipt is not None and response_dict.get("status_code") == 200:
        receipt.at_ms = receipt.clock.monotonic_millis()


class _ExpiredListingError(StreamSourceError):
    """A ListShards page token older than its 300 s: the listing starts again (once)."""


@dataclass(frozen=True, slots=True)
class KinesisShard:
    """One shard as ListShards lists it: its parents (two after a merge) and hash-key range."""

    shard_id: str
    parent_shard_ids: tuple[str, ...] = ()
    hash_range: tuple[int, int] = HASH_KEY_SPACE
    starting_sequence_number: str | None = None
    ending_sequence_number: str | None = None

    @property
    def is_open(self) -> bool:
        return self.ending_sequence_number is None

    def as_shard(self) -> Shard:
        """The shard as the port's :class:`~consumer.streams.source.Shard`, what shard sync plans over
        (both parents kept: a merge's child waits for both)."""
        parents = self.parent_shard_ids
        return Shard(
            self.shard_id,
            parents[0] if parents else None,
            self.starting_sequence_number,
            self.ending_sequence_number,
            parents[1] if len(parents) > 1 else None,
        )


@dataclass(frozen=True, slots=True)
class KinesisStreamInfo:
    """DescribeStreamSummary's answer: what a worker needs to name and plan a stream."""

    stream_arn: str
    stream_name: str
    status: str
    mode: str  # PROVISIONED | ON_DEMAND
    retention_hours: int
    created_epoch_seconds: int
    open_shards: int

    @property
    def identifier(self) -> str:
        """The Java KCL's multi-stream identifier ``<account>:<name>:<creation epoch seconds>``."""
        return kinesis_stream_identifier(self.stream_arn, self.created_epoch_seconds)


@dataclass(frozen=True, slots=True)
class KinesisBatch:
    """One GetRecords answer, de-aggregated. ``next_iterator`` None: a closed shard read to its end,
    whose children are ``child_shards`` (id and parents)."""

    records: tuple[KinesisRecord, ...]
    next_iterator: str | None
    millis_behind_latest: int
    child_shards: tuple[KinesisShard, ...]
    data_bytes: int  # data and partition keys of the Kinesis records, as the read limit counts them
    dropped_outside_shard: int  # aggregates the KPL put again on their right shard (read there)
    malformed_aggregates: int  # aggregates delivered raw (bad digest or protobuf)
    received_ms: float | None = None  # when its body was received, before parsing (the source's clock)

    @property
    def shard_ended(self) -> bool:
        return self.next_iterator is None


def _shard(item: Mapping[str, Any]) -> KinesisShard:
    numbers = item.get("SequenceNumberRange") or {}
    hashes = item.get("HashKeyRange") or {}
    parents = tuple(p for p in (item.get("ParentShardId"), item.get("AdjacentParentShardId")) if p)
    low, high = hashes.get("StartingHashKey"), hashes.get("EndingHashKey")
    return KinesisShard(
        shard_id=str(item["ShardId"]),
        parent_shard_ids=parents,
        hash_range=HASH_KEY_SPACE if low is None or high is None else (int(low), int(high)),
        starting_sequence_number=numbers.get("StartingSequenceNumber"),
        ending_sequence_number=numbers.get("EndingSequenceNumber"),
    )


def _child(item: Mapping[str, Any]) -> KinesisShard:
    hashes = item.get("HashKeyRange") or {}
    return KinesisShard(
        shard_id=str(item["ShardId"]),
        parent_shard_ids=tuple(item.get("ParentShards") or ()),
        hash_range=(
            int(hashes.get("StartingHashKey", 0)),
            int(hashes.get("EndingHashKey", HASH_KEY_SPACE[1])),
        ),
    )


class KinesisStreamSource:
    """Reads Kinesis data streams through an injected boto3 ``kinesis`` client."""

    def __init__(self, client: Any, rng: random.Random | None = None, clock: Clock | None = None) -> None:
        self._client = client
        self._rng = rng or random.Random()
        self._clock: Clock = clock or SystemClock()
        client.meta.events.register(
            "before-parse.kinesis.GetRecords", _received, unique_id="consumer-kinesis-received"
        )

    def _errors(
        self, action: str, resource: str, *, control_plane: bool = False
    ) -> AbstractContextManager[None]:
        return translated(
            action, resource, lambda code, detail, _message: _translate(code, detail, action, control_plane)
        )

    # ------------------------------------------------------------------------ control plane

    def describe(self, stream: str) -> KinesisStreamInfo:
        """The stream named by ``stream`` (a name or an ARN)."""
        request = {"StreamARN": stream} if stream.startswith("arn:") else {"StreamName": stream}
        with self._errors("kinesis:DescribeStreamSummary", f"stream {stream}", control_plane=True):
            summary = self._client.describe_stream_summary(**request)["StreamDescriptionSummary"]
        created = summary.get("StreamCreationTimestamp")
        return KinesisStreamInfo(
            stream_arn=str(summary["StreamARN"]),
            stream_name=str(summary["StreamName"]),
            status=str(summary.get("StreamStatus", "")),
            mode=str((summary.get("StreamModeDetails") or {}).get("StreamMode", "PROVISIONED")),
            retention_hours=int(summary.get("RetentionPeriodHours", 24)),
            created_epoch_seconds=int(created.timestamp())
            if isinstance(created, datetime)
            else int(created or 0),
            open_shards=int(summary.get("OpenShardCount", 0)),
        )

    def list_shards(
        self, stream_arn: str, shard_filter: Mapping[str, Any] | None = None
    ) -> tuple[KinesisShard, ...]:
        """Every shard ListShards lists (within retention; ``shard_filter`` as the API takes it),
        paged to the end. A page token that expired (300 s) restarts the listing once."""
        for attempt in range(2):
            shards: list[KinesisShard] = []
            request: dict[str, Any] = {"StreamARN": stream_arn}
            if shard_filter is not None:
                request["ShardFilter"] = dict(shard_filter)
            try:
                while True:
                    with self._errors("kinesis:ListShards", stream_arn, control_plane=True):
                        page = self._client.list_shards(**request)
                    shards.extend(_shard(s) for s in page.get("Shards", []))
                    token = page.get("NextToken")
                    if not token:
                        return tuple(shards)
                    request = {"NextToken": token}
            except _ExpiredListingError:
                if attempt == 0:
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def child_shards(self, stream_arn: str, shard_id: str) -> tuple[KinesisShard, ...]:
        """The children of one shard: the shards listed after it that name it as a parent."""
        after = self.list_shards(stream_arn, {"Type": "AFTER_SHARD_ID", "ShardId": shard_id})
        return tuple(s for s in after if shard_id in s.parent_shard_ids)

    # --------------------------------------------------------------------------- data plane

    def get_iterator(
        self, stream_arn: str, shard_id: str, position: Position, timestamp: float | None = None
    ) -> str:
        """An iterator at ``position``, or AT_TIMESTAMP (epoch seconds) when ``timestamp`` is given."""
        request: dict[str, Any] = {
            "StreamARN": stream_arn,
            "ShardId": shard_id,
            "ShardIteratorType": position.type,
        }
        if timestamp is not None:
            request["ShardIteratorType"] = "AT_TIMESTAMP"
            request["Timestamp"] = timestamp
        elif position.sequence_number is not None:
            request["StartingSequenceNumber"] = position.sequence_number
        with self._errors("kinesis:GetShardIterator", f"shard {shard_id} of {stream_arn}"):
            iterator = self._client.get_shard_iterator(**request).get("ShardIterator")
        if not isinstance(iterator, str):
            raise StreamFormatError(f"GetShardIterator on shard {shard_id} returned no ShardIterator")
        return iterator

    def get_records(self, iterator: str, limit: int, shard: KinesisShard) -> KinesisBatch:
        """Up to ``limit`` Kinesis records (≤ 10 000) from ``iterator``, as user records."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"GetRecords limit must be 1..{MAX_LIMIT}, got {limit}")
        receipt = _Receipt(self._clock)
        token = _RECEIPT.set(receipt)
        try:
            with self._errors("kinesis:GetRecords", f"shard {shard.shard_id}"):
                answer = self._client.get_records(ShardIterator=iterator, Limit=limit)
        finally:
            _RECEIPT.reset(token)
        records: list[KinesisRecord] = []
        size = dropped = malformed = 0
        for record in answer.get("Records", []):
            data, key = record.get("Data", b""), str(record.get("PartitionKey", ""))
            size += len(data) + len(key.encode())
            users, outcome = read_record(shard.shard_id, record, shard.hash_range)
            dropped += outcome == "outside_shard"
            malformed += outcome in ("bad_digest", "bad_protobuf")
            records.extend(users)
        next_iterator = answer.get("NextShardIterator")
        return KinesisBatch(
            records=tuple(records),
            next_iterator=next_iterator if isinstance(next_iterator, str) else None,
            millis_behind_latest=int(answer.get("MillisBehindLatest", 0)),
            child_shards=tuple(_child(c) for c in answer.get("ChildShards", [])),
            data_bytes=size,
            dropped_outside_shard=dropped,
            malformed_aggregates=malformed,
            received_ms=receipt.at_ms,
        )


def _translate(code: str, detail: str, action: str, control_plane: bool) -> StreamSourceError:
    if code == "ExpiredIteratorException":
        return ExpiredIteratorError(f"{detail} — get a new iterator from the last delivered position")
    if code in _THROTTLED:
        return ThrottledError(f"{detail} — back off; a shard serves 5 reads/s and 2 MiB/s to all its readers")
    if code in _DENIED or code.startswith("KMS"):
        return AccessDeniedError(
            f"{detail} — grant {action} (and kms:Decrypt for an encrypted stream) to the worker's role"
        )
    if code == "ResourceNotFoundException":
        if control_plane:
            return StreamNotFoundError(
                f"{detail} — no such stream: check the stream name or ARN and the region"
            )
        if "shard" in detail.lower().split(": ", 2)[-1]:
            return ShardNotFoundError(f"{detail} — the shard is gone (expired after the retention period)")
        return StreamGoneError(f"{detail} — the stream was deleted while being read")
    if code == "ExpiredNextTokenException":
        return _ExpiredListingError(f"{detail} — the listing took over 300 s: list again from the first page")
    if code in ("InvalidArgumentException", "ValidationException"):
        return InvalidStreamRequestError(
            f"{detail} — the request was refused as malformed: a bug or a bad setting"
        )
    if code in _TRANSIENT or not code or (code.isdigit() and code.startswith("5")):
        return TransientStreamError(
            f"{detail} — a service-side failure outlived botocore's retries; retry later"
        )
    return StreamSourceError(f"{detail} — unexpected error from Kinesis")

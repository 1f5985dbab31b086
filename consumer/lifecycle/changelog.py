"""The change-log writer: every delivered batch lands as one gzip JSON Lines object (docs/design.md).

Objects are named ``<destination>/<shard id>/<first seq>-<last seq>.jsonl.gz`` (sequence numbers
zero-padded to 40 digits), so a batch delivered again after a crash overwrites its own object instead
of adding a copy. A local object is written to a temporary name and renamed; an S3 object is put
whole — a reader never sees half an object. Only after the write succeeds is the batch checkpointed.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from consumer.lifecycle.ports import Checkpointer
from consumer.records import ShardInfo, StreamRecord


def change_line(
    record: StreamRecord, table: str, parents: tuple[str, ...], landed_at: float
) -> dict[str, Any]:
    body = record.raw["dynamodb"]
    return {
        "v": 1,
        "table": table,
        "shardId": record.shard_id,
        "parentShardIds": list(parents),
        "eventId": record.event_id,
        "eventName": record.event_name,
        "sequenceNumber": record.sequence_number,
        "approximateCreationDateTime": record.approximate_creation_time,
        "sizeBytes": record.size_bytes,
        "keys": body.get("Keys", {}),
        "newImage": body.get("NewImage"),
        "oldImage": body.get("OldImage"),
        "userIdentity": record.user_identity,
        "landedAt": landed_at,
    }


def object_name(shard_id: str, first: str, last: str) -> str:
    return f"{shard_id}/{first.zfill(40)}-{last.zfill(40)}.jsonl.gz"


def encode(lines: list[dict[str, Any]]) -> bytes:
    return gzip.compress(b"".join(orjson.dumps(line) + b"\n" for line in lines), compresslevel=5)


class ChangelogWriter:
    """Writes objects under a local directory or an ``s3://bucket/prefix`` (with an injected client)."""

    def __init__(self, destination: str, *, s3_client: Any = None) -> None:
        self.destination = destination
        self._s3 = s3_client
        if destination.startswith("s3://"):
            if s3_client is None:
                raise ValueError("an s3:// change-log destination needs an S3 client")
            bucket, _, prefix = destination[5:].partition("/")
            self._bucket, self._prefix = bucket, prefix.strip("/")
        else:
            Path(destination).mkdir(parents=True, exist_ok=True)

    def write(self, name: str, payload: bytes) -> None:
        if self._s3 is not None and self.destination.startswith("s3://"):
            key = f"{self._prefix}/{name}" if self._prefix else name
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=payload, ContentEncoding="gzip")
            return
        target = Path(self.destination) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


class ChangelogProcessor:
    """The ``changelog`` built-in processor: land the batch, then checkpoint it."""

    def __init__(self, writer: ChangelogWriter, table: str, now: Callable[[], float] = time.time) -> None:
        self._writer = writer
        self._table = table
        self._now = now
        self._shard: ShardInfo | None = None

    def initialize(self, shard: ShardInfo, checkpoint: str) -> None:
        self._shard = shard

    def process(
        self,
        records: tuple[StreamRecord, ...],
        millis_behind_latest: int,
        checkpointer: Checkpointer,
        should_stop: Callable[[], bool],
    ) -> None:
        if not records:
            return
        shard = self._shard or ShardInfo(records[0].shard_id)
        landed = self._now()
        lines = [change_line(r, self._table, shard.parent_shard_ids, landed) for r in records]
        name = object_name(shard.shard_id, records[0].sequence_number, records[-1].sequence_number)
        self._writer.write(name, encode(lines))
        checkpointer.checkpoint(records[-1].sequence_number)

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()

    def lease_lost(self) -> None:
        return None

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        return None  # every batch was checkpointed as soon as it landed

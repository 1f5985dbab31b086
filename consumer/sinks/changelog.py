"""The ``changelog`` sink: every change lands as one line of a per-batch object (docs/design.md).

Objects are named ``<destination>/<shard id>/<first seq>-<last seq>.jsonl.gz`` (sequence numbers
zero-padded to 40 digits). A batch delivered again after a crash has the same first and last
sequence numbers, so it overwrites its own object instead of adding a copy — the Spark pipeline
can de-duplicate by name. A local object is written under a temporary name and renamed, an S3
object is put whole: no reader ever sees half an object.

Batch boundaries can differ on a replay (the new owner's first GetRecords may return more records
than the crashed owner's did), so the sink applies the record path's redelivery rule
(:mod:`consumer.processing.redelivery`) against its destination: each time this worker starts a
shard (every lease acquisition: :meth:`ChangelogSink.shard_started`), the first batch lists
``<shard id>/`` once and keeps, as ranges, the objects landed after the checkpoint it starts from;
records inside them are not written again. Its floor then follows what it handled (one shard's
records reach it in order), which absorbs those ranges as it passes them, so per shard it keeps one
number and the few ranges an earlier owner landed past its last checkpoint — flat over the shard's
life — and it forgets the shard when the ownership ends (:meth:`ChangelogSink.shard_stopped`).
Every change is in exactly one object per (shard, sequence number), unless two workers write the
same shard at once (a fenced zombie), which the pipeline's de-duplication by (shard, sequence
number) absorbs.

``format: parquet`` writes ``.parquet`` objects with the same fields (images as attribute-value
JSON strings) for readers that prefer columns; the bundled Spark pipeline reads JSON Lines.

A reload (``worker.on_trimmed: reload``, docs/processing.md) lands apart, under
``<destination>/_reloads/<reload id>/``: ``start.json`` (the gap event) when it begins, one object
per page named by its records' numbers (the same page delivered again overwrites itself), and
``end.json`` once every page is landed. A reload with its ``end.json`` is the table's whole state as
of its ``reloadStartedAt`` or later, which the pipeline takes as its new base (pipeline/reloads.py);
one without (the worker stopped mid-reload) is never used.
"""

from __future__ import annotations

import gzip
import io
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from consumer.processing.api import Batch, BatchResult
from consumer.processing.errors import HandlerStoppedError, SinkError
from consumer.processing.gap import GapEvent
from consumer.processing.redelivery import NOTHING_DONE, DoneSequences, floor_of
from consumer.records import ShardInfo, StreamRecord
from ground.files import write_atomically
from ground.positions import SUB_SEQUENCE_SPAN as SPAN
from ground.positions import ordinal

log = logging.getLogger("consumer.sinks")
ChangelogFormat = Literal["jsonl", "parquet"]
SUFFIX: dict[str, str] = {"jsonl": ".jsonl.gz", "parquet": ".parquet"}
_NAME = re.compile(r"^(\d{40})-(\d{40})\.(?:jsonl\.gz|parquet)$")


def change_line(
    record: StreamRecord, table: str, parents: tuple[str, ...], landed_at: float
) -> dict[str, Any]:
    # One parse of a held record: ``raw`` parses its bytes afresh, and the event ID and user
    # identity (not held on a WireRecord) are read from that parse, as StreamRecord reads them.
    raw = record.raw
    body = raw["dynamodb"]
    identity = raw.get("userIdentity")
    line = {
        "v": 1,
        "table": table,
        "shardId": record.shard_id,
        "parentShardIds": list(parents),
        "eventId": str(raw.get("eventID", "")),
        "eventName": record.event_name,
        "sequenceNumber": record.sequence_number,
        "approximateCreationDateTime": record.approximate_creation_time,
        "sizeBytes": record.size_bytes,
        "keys": body.get("Keys", {}),
        "newImage": body.get("NewImage"),
        "oldImage": body.get("OldImage"),
        "userIdentity": identity if isinstance(identity, Mapping) else None,
        "landedAt": landed_at,
    }
    if record.reloaded:
        line["reloaded"] = True
        line["reloadId"] = raw.get("reloadId")
    return line


LANE_MARK = "~lane"
RELOADS = "_reloads"  # where reloads land (the pipeline says the same: pipeline/reloads.py)


def lane_prefix(batch: Batch) -> str:
    """Where a batch's objects go: ``<shard id>/``, or ``<shard id>~laneIIofNN/`` for one lane's.

    Under ``processing.parallelization_factor`` N > 1 a batch holds one lane's records only (the
    items whose keys hash to it), so an object named ``<first>-<last>`` in the shard's folder would
    claim records of other lanes in between: a later owner would skip them. Each lane therefore has
    its own folder, in which the redelivery rule holds as on the serial path: a lane's records
    reach it in order, and every record of the lane between an object's first and last is in it.
    (A replay with another factor writes other folders: copies, never gaps; the pipeline
    de-duplicates by shard and sequence number.)
    """
    if batch.lanes <= 1:
        return batch.shard_id
    return f"{batch.shard_id}{LANE_MARK}{batch.lane:02d}of{batch.lanes:02d}"


def object_name(shard_id: str, first: str, last: str, fmt: ChangelogFormat = "jsonl") -> str:
    return f"{shard_id}/{first.zfill(40)}-{last.zfill(40)}{SUFFIX[fmt]}"


def encode_jsonl(lines: list[dict[str, Any]]) -> bytes:
    # mtime=0: the same batch always gives the same bytes, so a replay is byte-for-byte identical.
    return gzip.compress(b"".join(orjson.dumps(line) + b"\n" for line in lines), compresslevel=5, mtime=0)


def encode_parquet(lines: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    json_columns = ("keys", "newImage", "oldImage", "userIdentity")
    rows = [
        {
            k: (None if v is None else orjson.dumps(v).decode()) if k in json_columns else v
            for k, v in line.items()
        }
        for line in lines
    ]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer, compression="snappy")
    return buffer.getvalue()


class ChangelogDestination(Protocol):
    """Where the sink lands objects: :class:`ChangelogStore` (a directory or S3), or a test's own."""

    destination: str

    def put(self, name: str, payload: bytes) -> None: ...

    def landed_ranges(self, shard_id: str) -> list[tuple[int, int]]: ...


class ChangelogStore:
    """Puts whole objects under a local directory or ``s3://bucket/prefix`` (injected S3 client)."""

    def __init__(self, destination: str, *, s3_client: Any = None) -> None:
        self.destination = destination
        self._s3 = s3_client
        self._bucket = self._prefix = ""
        if destination.startswith("s3://"):
            if s3_client is None:
                raise SinkError(f"change-log destination {destination} needs an S3 client")
            self._bucket, _, prefix = destination[5:].partition("/")
            self._prefix = prefix.strip("/")

    def put(self, name: str, payload: bytes) -> None:
        try:
            if self._bucket:
                key = f"{self._prefix}/{name}" if self._prefix else name
                self._s3.put_object(Bucket=self._bucket, Key=key, Body=payload)
            else:
                self._put_local(Path(self.destination) / name, payload)
        except Exception as exc:
            raise SinkError(f"cannot write change-log object {name} to {self.destination}: {exc}") from exc

    def landed_ranges(self, shard_id: str) -> list[tuple[int, int]]:
        """(first, last) sequence numbers of every object already landed for the shard."""
        try:
            if self._bucket:
                prefix = f"{self._prefix}/{shard_id}/" if self._prefix else f"{shard_id}/"
                names = []
                for page in self._s3.get_paginator("list_objects_v2").paginate(
                    Bucket=self._bucket, Prefix=prefix
                ):
                    names += [obj["Key"].rpartition("/")[2] for obj in page.get("Contents", [])]
            else:
                folder = Path(self.destination) / shard_id
                names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
        except Exception as exc:
            raise SinkError(
                f"cannot list change-log objects of {shard_id} in {self.destination}: {exc}"
            ) from exc
        found = (_NAME.match(name) for name in names)
        return [(int(m.group(1)), int(m.group(2))) for m in found if m]

    @staticmethod
    def _put_local(target: Path, payload: bytes) -> None:
        write_atomically(target, payload)


class ChangelogSink:
    """Function-form handler: one object per batch; returns normally once the object is durable.

    Per shard it keeps a :class:`~consumer.processing.redelivery.DoneSequences` for the current
    ownership only: loaded from the destination at the first batch after :meth:`shard_started`
    (or after the sink first sees the shard, when nobody calls the hooks) and dropped by
    :meth:`shard_stopped`. The factory creates one sink per lease; the hooks make the same hold
    for a sink shared by several shards or ownerships.
    """

    def __init__(
        self,
        store: ChangelogDestination,
        table: str,
        *,
        fmt: ChangelogFormat = "jsonl",
        now: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._table = table
        self._format: ChangelogFormat = fmt
        self._now = now
        # Per shard (and lane, under processing.parallelization_factor: see lane_prefix).
        self._done: dict[str, DoneSequences] = {}
        self._starts: dict[str, int] = {}  # started, destination not looked at yet: the start floor
        self._lock = threading.Lock()

    # ------------------------------------------------------------ the shard's ownership (ShardScoped)

    def shard_started(self, shard: ShardInfo, checkpoint: str) -> None:
        """This worker (re)starts the shard after ``checkpoint``: what it knew may be stale (another
        worker may have landed more meanwhile), so the first batch looks at the destination again."""
        with self._lock:
            self._forget(shard.shard_id)
            self._starts[shard.shard_id] = floor_of(checkpoint)

    def shard_stopped(self, shard: ShardInfo) -> None:
        """The ownership ended (lease lost, shard end, hand-off): nothing about the shard is kept."""
        with self._lock:
            self._forget(shard.shard_id)
            self._starts.pop(shard.shard_id, None)

    def _forget(self, shard_id: str) -> None:
        for prefix in [p for p in self._done if p == shard_id or p.startswith(shard_id + LANE_MARK)]:
            del self._done[prefix]

    def remembered(self, shard_id: str) -> DoneSequences | None:
        """What the sink keeps about the shard now (None: nothing), for tests and diagnostics."""
        with self._lock:
            return self._done.get(shard_id)

    def _state(self, shard_id: str, prefix: str) -> DoneSequences:
        """What is landed under ``prefix`` (the shard's, or one lane's, objects) for this ownership."""
        with self._lock:
            known = self._done.get(prefix)
            floor = self._starts.get(shard_id, NOTHING_DONE)
        if known is None:
            # Only objects past the start can matter: the lifecycle delivers nothing at or before it.
            # Sequence numbers as positions (ground.positions.ordinal), what the rule compares.
            landed = self._store.landed_ranges(prefix)
            known = DoneSequences(floor, [(first * SPAN, last * SPAN) for first, last in landed])
            with self._lock:
                known = self._done.setdefault(prefix, known)
        return known

    # ------------------------------------------------------------------------------- the handler

    def __call__(self, batch: Batch) -> BatchResult | None:
        if batch.gap is not None or batch.reload is not None:
            self._reload(batch)
            return None
        prefix = lane_prefix(batch)
        done = self._state(batch.shard_id, prefix)
        fresh = done.fresh(batch.records)
        if fresh.skipped:
            # A redelivery: an earlier owner (or an earlier attempt) landed these and stopped before
            # its checkpoint. The demo's verdict attributes these lines to their cause.
            log.info(
                "changelog: %d record(s) of shard %s already landed by an earlier delivery; not written again",
                fresh.skipped,
                batch.shard_id,
            )
        for run in fresh.runs:
            if not batch.lease_held():
                # The lease is gone (or this worker was frozen and has fenced itself): landing
                # now could overwrite what the next owner lands. It delivers the batch again.
                # A graceful stop keeps the lease until the checkpoint: the batch lands.
                raise HandlerStoppedError(
                    f"shard {batch.shard_id}: stopping before landing {len(run)} records"
                )
            self._write(prefix, batch, list(run))
            # Everything of the batch up to here is landed now or was already: one shard's records
            # reach the sink in order, so the floor moves up to it (and absorbs the ranges it passes).
            done.advance(ordinal(run[-1].position))
        if batch.records:
            done.advance(ordinal(batch.records[-1].position))
        return None

    def _write(self, prefix: str, batch: Batch, records: list[StreamRecord]) -> None:
        landed = self._now()
        lines = [change_line(r, self._table, batch.shard.parent_shard_ids, landed) for r in records]
        first, last = records[0].sequence_number, records[-1].sequence_number
        payload = encode_jsonl(lines) if self._format == "jsonl" else encode_parquet(lines)
        self._store.put(object_name(prefix, first, last, self._format), payload)

    def _reload(self, batch: Batch) -> None:
        """A reload's marker (start.json, end.json) or one of its pages (module docstring)."""
        gap = batch.gap or batch.reload
        assert gap is not None
        folder = f"{RELOADS}/{gap.reload_id}"
        if batch.gap is not None:
            name = "start.json" if batch.gap.phase == "gap" else "end.json"
            self._store.put(f"{folder}/{name}", orjson.dumps(reload_marker(batch.gap)))
        elif batch.records:
            self._write(folder, batch, list(batch.records))


def reload_marker(gap: GapEvent) -> dict[str, Any]:
    return {"v": 1, **gap.as_json()}

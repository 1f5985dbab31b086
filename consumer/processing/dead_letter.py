"""On-failure destinations: where records go once the retry policy gives up on them.

Each destination receives the records exactly as on the wire, with the error and the number of
attempts, and returns only once they are durable; the failure policy checkpoints past the records
only after that. A dead letter that cannot be written raises :class:`DeadLetterError` and the
records stay where they are (nothing is lost).

* ``local``: one JSON file per failed span, ``<dir>/<shard>/<first seq>-<last seq>.json``, written
  atomically (temporary name + rename); the name makes a replay overwrite instead of duplicate.
* ``s3``: the same document under ``s3://bucket/prefix/<shard>/<first>-<last>.json``.
* ``sqs``: one message per record (SQS caps a message at 256 KiB), sent in batches of ten.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from consumer.processing.errors import DeadLetterError, ProcessingConfigError
from consumer.records import ShardInfo, StreamRecord
from ground.files import write_atomically
from ground.settings import DeadLetterSettings


@dataclass(frozen=True)
class FailedRecords:
    shard: ShardInfo
    records: tuple[StreamRecord, ...]
    error: BaseException | str
    attempts: int

    @property
    def error_type(self) -> str:
        return type(self.error).__name__ if isinstance(self.error, BaseException) else "Error"

    @property
    def error_message(self) -> str:
        return str(self.error)

    def document(self, now: float) -> dict[str, Any]:
        return {
            "v": 1,
            "shardId": self.shard.shard_id,
            "parentShardIds": list(self.shard.parent_shard_ids),
            "error": {"type": self.error_type, "message": self.error_message},
            "attempts": self.attempts,
            "deadLetteredAt": now,
            "firstSequenceNumber": self.records[0].sequence_number,
            "lastSequenceNumber": self.records[-1].sequence_number,
            "records": [dict(r.raw) for r in self.records],
        }

    @property
    def name(self) -> str:
        # Positions: two spans of one KPL aggregate share their sequence numbers, not their names.
        first = self.records[0].position.zfill(40)
        last = self.records[-1].position.zfill(40)
        return f"{self.shard.shard_id}/{first}-{last}.json"


def _dumps(document: Any) -> bytes:
    return orjson.dumps(document, default=str)


class DeadLetter(Protocol):
    description: str

    def send(self, failed: FailedRecords) -> None:
        """Make the records durable at the destination, or raise DeadLetterError."""
        ...


class LocalDeadLetter:
    def __init__(self, directory: str | Path, now: Callable[[], float] = time.time) -> None:
        self.directory = Path(directory)
        self.description = str(self.directory)
        self._now = now

    def send(self, failed: FailedRecords) -> None:
        target = self.directory / failed.name
        try:
            write_atomically(target, _dumps(failed.document(self._now())))
        except OSError as exc:
            raise DeadLetterError(f"cannot write dead letter {target}: {exc}") from exc

    def read_all(self) -> list[dict[str, Any]]:
        """Every dead-lettered document (for operators and tests), oldest name first."""
        return [orjson.loads(p.read_bytes()) for p in sorted(self.directory.glob("*/*.json"))]


def split_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ProcessingConfigError(f"{uri!r} is not an s3://bucket/prefix URI")
    bucket, _, prefix = uri[5:].partition("/")
    if not bucket:
        raise ProcessingConfigError(f"{uri!r} names no bucket (expected s3://bucket/prefix)")
    return bucket, prefix.strip("/")


class S3DeadLetter:
    def __init__(self, uri: str, s3_client: Any, now: Callable[[], float] = time.time) -> None:
        self._bucket, self._prefix = split_s3_uri(uri)
        self._s3 = s3_client
        self._now = now
        self.description = uri

    def send(self, failed: FailedRecords) -> None:
        key = f"{self._prefix}/{failed.name}" if self._prefix else failed.name
        try:
            self._s3.put_object(
                Bucket=self._bucket,
                Key=key,
                Body=_dumps(failed.document(self._now())),
                ContentType="application/json",
            )
        except Exception as exc:
            raise DeadLetterError(f"cannot write dead letter s3://{self._bucket}/{key}: {exc}") from exc


class SqsDeadLetter:
    def __init__(self, queue_url: str, sqs_client: Any, now: Callable[[], float] = time.time) -> None:
        self._queue_url = queue_url
        self._sqs = sqs_client
        self._now = now
        self.description = queue_url

    def _messages(self, failed: FailedRecords) -> list[dict[str, str]]:
        base = failed.document(self._now())
        del base["records"]
        messages = []
        for index, record in enumerate(failed.records):
            body = {**base, "record": dict(record.raw), "sequenceNumber": record.sequence_number}
            messages.append({"Id": str(index), "MessageBody": _dumps(body).decode()})
        return messages

    def send(self, failed: FailedRecords) -> None:
        messages = self._messages(failed)
        for start in range(0, len(messages), 10):
            chunk: Sequence[dict[str, str]] = messages[start : start + 10]
            try:
                answer = self._sqs.send_message_batch(QueueUrl=self._queue_url, Entries=list(chunk))
            except Exception as exc:
                raise DeadLetterError(f"cannot send dead letter to {self._queue_url}: {exc}") from exc
            refused = answer.get("Failed") or []
            if refused:
                reasons = "; ".join(f"{f.get('Code')}: {f.get('Message')}" for f in refused)
                raise DeadLetterError(f"SQS {self._queue_url} refused {len(refused)} dead letters: {reasons}")


def build_dead_letter(
    settings: DeadLetterSettings, *, s3_client: Any = None, sqs_client: Any = None
) -> DeadLetter | None:
    """The destination ``processing.dead_letter`` names, or None (retries never stop)."""
    if settings.type == "none":
        return None
    uri = settings.uri or ""
    if settings.type == "local":
        if uri.startswith(("s3://", "https://", "http://")):
            raise ProcessingConfigError(f"processing.dead_letter.uri {uri!r}: type local needs a directory")
        return LocalDeadLetter(uri)
    if settings.type == "s3":
        split_s3_uri(uri)
        if s3_client is None:
            raise ProcessingConfigError(f"processing.dead_letter type s3 ({uri}) needs an S3 client")
        return S3DeadLetter(uri, s3_client)
    if not uri.startswith(("https://", "http://")):
        raise ProcessingConfigError(
            f"processing.dead_letter.uri {uri!r}: type sqs needs a queue URL (https://sqs.<region>...)"
        )
    if sqs_client is None:
        raise ProcessingConfigError(f"processing.dead_letter type sqs ({uri}) needs an SQS client")
    return SqsDeadLetter(uri, sqs_client)

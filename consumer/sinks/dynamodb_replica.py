"""The ``dynamodb_replica`` sink: apply every change to another table (e.g. in another region).

Each write carries the source record's sequence number (zero-padded to 40 digits, so string order
is number order) in ``sequence_attribute`` and is conditional on the replica holding an older one:

    put:    attribute_not_exists(seq) OR seq < :this      (INSERT, MODIFY: the whole new image)
    delete: attribute_not_exists(seq) OR seq < :this      (REMOVE)

so a batch delivered twice, or a retry that arrives after a newer change, never rolls an item back.
A condition failure means "the replica is already newer" and counts as applied.

A delete leaves no item to hold the sequence number. Without ``tombstone_table`` a late retry of a
change older than the delete would re-create the item (an in-order replay ends right, because it
applies the REMOVE again). With ``tombstone_table`` (same key schema as the replica) every delete
also writes ``keys + sequence number + expiresAt`` there in one transaction, and every put checks it
in the same transaction, so nothing older than a delete can bring the item back. ``expiresAt``
(epoch seconds, two days on: stream records live 24 h) is meant for the table's TTL.

A reload (``worker.on_trimmed: reload``, docs/processing.md) repairs the replica. Every write also
keeps the change's creation time in ``<sequence_attribute>Time``. A re-loaded item is put with the
sequence number 0 and the reload's start ``T`` as its time, only where the replica holds an older
time (``#t < :T``): the scan read the table at or after ``T``, so what the replica has from before is
older, and what it has from after is newer. Once a re-loaded item is there, a stream change applies
only if it was created at or after ``T`` (an older one, from a shard that lags, was already in the
scan). When the reload is over (its ``reloaded`` marker), every replica item whose time is before
``T`` is deleted (conditionally, on the same): it was not in the table when the scan read it, so it
was deleted during the gap, where no REMOVE is left to say so.

Not guaranteed: without ``tombstone_table``, an item deleted after the scan read it and whose REMOVE
the replica applied before the re-loaded put arrives comes back (the put finds no item to compare
with); with it, the put checks the tombstone's time too.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from typing import Any

from consumer.processing.api import Batch, BatchResult
from consumer.processing.errors import SinkError
from consumer.records import StreamRecord

DEFAULT_SEQUENCE_ATTRIBUTE = "_sourceSequenceNumber"
RELOADED_SEQUENCE = "0" * 40  # a re-loaded item's: below any stream record's
# A stream change: newer than the replica's, and (over a re-loaded item) created at or after the reload.
_CONDITION = "attribute_not_exists(#seq) OR (#seq < :seq AND (#seq <> :reloaded OR #t <= :t))"
# A re-loaded item, or the sweep: what the replica holds is from before the reload's start.
_OLDER = "attribute_not_exists(#t) OR #t < :t"
TOMBSTONE_LIFETIME_SECONDS = 2 * 24 * 3600


def to_client_value(value: Mapping[str, Any]) -> dict[str, Any]:
    """Wire form (binary base64 text) → what the boto3 client sends (binary as bytes)."""
    ((kind, raw),) = value.items()
    if kind == "B":
        return {"B": raw if isinstance(raw, bytes) else base64.b64decode(raw)}
    if kind == "BS":
        return {"BS": [b if isinstance(b, bytes) else base64.b64decode(b) for b in raw]}
    if kind == "M":
        return {"M": {k: to_client_value(v) for k, v in raw.items()}}
    if kind == "L":
        return {"L": [to_client_value(v) for v in raw]}
    return {kind: raw}


def to_client_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: to_client_value(value) for name, value in item.items()}


class DynamoDBReplicaSink:
    def __init__(
        self,
        table_name: str,
        dynamodb_client: Any,
        *,
        sequence_attribute: str = DEFAULT_SEQUENCE_ATTRIBUTE,
        tombstone_table: str | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.table_name = table_name
        self.tombstone_table = tombstone_table
        self._dynamodb = dynamodb_client
        self._seq = sequence_attribute
        self._time = f"{sequence_attribute}Time"
        self._now = now

    def __call__(self, batch: Batch) -> BatchResult | None:
        if batch.gap is not None:
            if batch.gap.phase == "reloaded":
                self.sweep(batch.gap.reload_started_at)
            return None
        for record in batch.records:
            if record.reloaded:
                self.reload(record)
            else:
                self.apply(record)
        return None

    def reload(self, record: StreamRecord) -> bool:
        """Put a re-loaded item where the replica's is from before the reload (module docstring)."""
        started = record.approximate_creation_time
        image = record.raw.get("dynamodb", {}).get("NewImage")
        if image is None:
            raise SinkError(f"re-loaded record {record.event_id} has no NewImage")
        item = to_client_item(image)
        item[self._seq] = {"S": RELOADED_SEQUENCE}
        item[self._time] = {"N": repr(started)}
        older = {
            "ConditionExpression": _OLDER,
            "ExpressionAttributeNames": {"#t": self._time},
            "ExpressionAttributeValues": {":t": {"N": repr(started)}},
        }
        try:
            if self.tombstone_table is None:
                self._dynamodb.put_item(TableName=self.table_name, Item=item, **older)
            else:
                keys = to_client_item(record.raw["dynamodb"]["Keys"])
                self._dynamodb.transact_write_items(
                    TransactItems=[
                        {"Put": {"TableName": self.table_name, "Item": item, **older}},
                        {"ConditionCheck": {"TableName": self.tombstone_table, "Key": keys, **older}},
                    ]
                )
        except Exception as exc:
            if _refused(exc):
                return False
            raise SinkError(f"replica {self.table_name}: cannot apply re-loaded {record!r}: {exc}") from exc
        return True

    def sweep(self, started: float) -> int:
        """After a reload: delete every item whose change is from before its start (module docstring)."""
        names = {"#t": self._time}
        values = {":t": {"N": repr(started)}}
        described = self._dynamodb.describe_table(TableName=self.table_name)["Table"]
        key_names = [k["AttributeName"] for k in described["KeySchema"]]
        deleted = 0
        try:
            pages = self._dynamodb.get_paginator("scan").paginate(
                TableName=self.table_name,
                FilterExpression=_OLDER,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ConsistentRead=True,
            )
            for page in pages:
                for found in page.get("Items", []):
                    key = {name: found[name] for name in key_names}
                    try:
                        self._dynamodb.delete_item(
                            TableName=self.table_name,
                            Key=key,
                            ConditionExpression=_OLDER,
                            ExpressionAttributeNames=names,
                            ExpressionAttributeValues=values,
                        )
                        deleted += 1
                    except Exception as exc:
                        if not _refused(exc):
                            raise
        except SinkError:
            raise
        except Exception as exc:
            raise SinkError(f"replica {self.table_name}: cannot sweep after the reload: {exc}") from exc
        return deleted

    def apply(self, record: StreamRecord) -> bool:
        """Apply one change; False when the replica already had a newer one (nothing written)."""
        body = record.raw.get("dynamodb", {})
        sequence = record.sequence_number.zfill(40)
        created = {"N": repr(record.approximate_creation_time)}
        condition = {
            "ConditionExpression": _CONDITION,
            "ExpressionAttributeNames": {"#seq": self._seq, "#t": self._time},
            "ExpressionAttributeValues": {
                ":seq": {"S": sequence},
                ":reloaded": {"S": RELOADED_SEQUENCE},
                ":t": created,
            },
        }
        keys = to_client_item(body["Keys"])
        try:
            if record.event_name == "REMOVE":
                self._remove(keys, sequence, condition)
            else:
                image = body.get("NewImage")
                if image is None:
                    raise SinkError(
                        f"record {record.sequence_number} has no NewImage: the replica needs "
                        "table.stream_view_type NEW_IMAGE or NEW_AND_OLD_IMAGES"
                    )
                item = to_client_item(image)
                item[self._seq] = {"S": sequence}
                item[self._time] = created
                self._put(keys, item, condition)
        except SinkError:
            raise
        except Exception as exc:
            if _refused(exc):
                return False
            raise SinkError(f"replica {self.table_name}: cannot apply {record!r}: {exc}") from exc
        return True

    def _put(self, keys: dict[str, Any], item: dict[str, Any], condition: dict[str, Any]) -> None:
        if self.tombstone_table is None:
            self._dynamodb.put_item(TableName=self.table_name, Item=item, **condition)
            return
        self._dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": self.table_name, "Item": item, **condition}},
                {"ConditionCheck": {"TableName": self.tombstone_table, "Key": keys, **condition}},
            ]
        )

    def _remove(self, keys: dict[str, Any], sequence: str, condition: dict[str, Any]) -> None:
        if self.tombstone_table is None:
            self._dynamodb.delete_item(TableName=self.table_name, Key=keys, **condition)
            return
        tombstone = {
            **keys,
            self._seq: {"S": sequence},
            self._time: condition["ExpressionAttributeValues"][":t"],
            "expiresAt": {"N": str(int(self._now()) + TOMBSTONE_LIFETIME_SECONDS)},
        }
        self._dynamodb.transact_write_items(
            TransactItems=[
                {"Delete": {"TableName": self.table_name, "Key": keys, **condition}},
                {"Put": {"TableName": self.tombstone_table, "Item": tombstone, **condition}},
            ]
        )


def _refused(exc: Exception) -> bool:
    """A condition failure: the replica (or its tombstone) is already at a newer change."""
    error = getattr(exc, "response", {}).get("Error", {})
    if error.get("Code") == "ConditionalCheckFailedException":
        return True
    if error.get("Code") != "TransactionCanceledException":
        return False
    reasons = getattr(exc, "response", {}).get("CancellationReasons") or []
    codes = {r.get("Code") for r in reasons} - {"None", None}
    if codes:
        return codes == {"ConditionalCheckFailed"}
    return "ConditionalCheckFailed" in str(error.get("Message", ""))

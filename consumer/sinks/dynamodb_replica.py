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
_CONDITION = "attribute_not_exists(#seq) OR #seq < :seq"
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
        self._now = now

    def __call__(self, batch: Batch) -> BatchResult | None:
        for record in batch.records:
            self.apply(record)
        return None

    def apply(self, record: StreamRecord) -> bool:
        """Apply one change; False when the replica already had a newer one (nothing written)."""
        body = record.raw.get("dynamodb", {})
        sequence = record.sequence_number.zfill(40)
        condition = {
            "ConditionExpression": _CONDITION,
            "ExpressionAttributeNames": {"#seq": self._seq},
            "ExpressionAttributeValues": {":seq": {"S": sequence}},
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

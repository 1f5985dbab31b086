"""The ``dynamodb_replica`` sink: apply every change to another table (another region, seed 002).

Each write carries the source record's sequence number (zero-padded to 40 digits, so string order
is number order) in ``sequence_attribute`` and is conditional on the replica holding an older one:

    put:    attribute_not_exists(seq) OR seq < :this      (INSERT, MODIFY: the whole new image)
    delete: attribute_not_exists(seq) OR seq < :this      (REMOVE)

so a batch delivered twice, or a retry that arrives after a newer change, never rolls an item back.
A condition failure means "the replica is already newer" and counts as applied. A delete leaves no
sequence number behind: a replay from an older checkpoint re-creates the item briefly and then
applies the same REMOVE again, since replays run in order up to where the shard had got to.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from consumer.processing.api import Batch, BatchResult
from consumer.processing.errors import SinkError
from consumer.records import StreamRecord

DEFAULT_SEQUENCE_ATTRIBUTE = "_sourceSequenceNumber"
_CONDITION = "attribute_not_exists(#seq) OR #seq < :seq"


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
        self, table_name: str, dynamodb_client: Any, *, sequence_attribute: str = DEFAULT_SEQUENCE_ATTRIBUTE
    ) -> None:
        self.table_name = table_name
        self._dynamodb = dynamodb_client
        self._seq = sequence_attribute

    def __call__(self, batch: Batch) -> BatchResult | None:
        for record in batch.records:
            self.apply(record)
        return None

    def apply(self, record: StreamRecord) -> bool:
        """Apply one change; False when the replica already had a newer one (nothing written)."""
        body = record.raw.get("dynamodb", {})
        condition = {
            "ConditionExpression": _CONDITION,
            "ExpressionAttributeNames": {"#seq": self._seq},
            "ExpressionAttributeValues": {":seq": {"S": record.sequence_number.zfill(40)}},
        }
        try:
            if record.event_name == "REMOVE":
                self._dynamodb.delete_item(
                    TableName=self.table_name, Key=to_client_item(body["Keys"]), **condition
                )
            else:
                image = body.get("NewImage")
                if image is None:
                    raise SinkError(
                        f"record {record.sequence_number} has no NewImage: the replica needs "
                        "table.stream_view_type NEW_IMAGE or NEW_AND_OLD_IMAGES"
                    )
                item = to_client_item(image)
                item[self._seq] = {"S": record.sequence_number.zfill(40)}
                self._dynamodb.put_item(TableName=self.table_name, Item=item, **condition)
        except SinkError:
            raise
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code == "ConditionalCheckFailedException":
                return False
            raise SinkError(f"replica {self.table_name}: cannot apply {record!r}: {exc}") from exc
        return True

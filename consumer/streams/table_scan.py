"""The source table read by a reload (``worker.on_trimmed: reload``): DescribeTable and a paced,
strongly consistent parallel Scan, one page at a time, with the capacity each page consumed.

Strongly consistent, because a reload's records stand for the table's state at or after the time
the reload started (consumer/processing/gap.py): an eventually consistent page could miss a write
made just before. It costs twice the units of an eventually consistent read, and the pace counts it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ScanPageResult:
    items: tuple[Mapping[str, Any], ...]  # wire form, as Scan returns them
    last_key: Mapping[str, Any] | None  # LastEvaluatedKey: None once the segment is read to its end
    units: float  # ConsumedCapacity.CapacityUnits


class DynamoDBTableScanner:
    def __init__(self, dynamodb_client: Any, table_name: str) -> None:
        self._client = dynamodb_client
        self.table_name = table_name
        self.region: str | None = getattr(getattr(dynamodb_client, "meta", None), "region_name", None)

    def describe(self) -> Mapping[str, Any]:
        table: Mapping[str, Any] = self._client.describe_table(TableName=self.table_name)["Table"]
        return table

    def scan_page(
        self, segment: int, total_segments: int, start_key: Mapping[str, Any] | None, limit: int
    ) -> ScanPageResult:
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Segment": segment,
            "TotalSegments": total_segments,
            "Limit": limit,
            "ConsistentRead": True,
            "ReturnConsumedCapacity": "TOTAL",
        }
        if start_key is not None:
            request["ExclusiveStartKey"] = dict(start_key)
        page = self._client.scan(**request)
        units = float((page.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))
        items = tuple(wire_item(item) for item in page.get("Items", ()))
        return ScanPageResult(items, page.get("LastEvaluatedKey"), units)


def wire_value(value: Mapping[str, Any]) -> dict[str, Any]:
    """The client's attribute value (binary as bytes) in the stream's wire form (binary as base64)."""
    ((kind, raw),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(raw).decode() if isinstance(raw, bytes | bytearray) else raw}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode() if isinstance(b, bytes | bytearray) else b for b in raw]}
    if kind == "M":
        return {"M": {k: wire_value(v) for k, v in raw.items()}}
    if kind == "L":
        return {"L": [wire_value(v) for v in raw]}
    return {kind: raw}


def wire_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: wire_value(value) for name, value in item.items()}

"""Where tumbling-window state is kept between batches and across owners of a shard's lease.

Versions of each shard's window state, keyed by the sequence number they are as of (the checkpoint
written right after them): in memory for tests and examples, a DynamoDB table of their own for the
fleet (never the leases table, which every taker scans). How the versions are chosen and pruned is
in :mod:`consumer.processing.windows`.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ground.positions import split_position


def version_of(position: str) -> str:
    """The key of the version as of ``position`` (a sequence number, or ``<sequence>.<sub>`` inside a
    Kinesis aggregate), ordered as text as the positions are: the sequence number on 40 digits, then
    a sub-sequence number on 10 when there is one. Idempotent (a key is its own key)."""
    sequence, sub_sequence = split_position(position)
    return sequence.zfill(40) + (f".{sub_sequence:010d}" if sub_sequence else "")


@dataclass(frozen=True, slots=True)
class SavedWindow:
    """One version of a shard's window state, as of ``sequence_number`` (the checkpoint beside it)."""

    sequence_number: str
    window_start: float | None
    closed: bool
    state: dict[str, Any]


class WindowStateStore(Protocol):
    """Versions of each shard's window state, by the sequence number they are as of."""

    def save(self, shard_id: str, saved: SavedWindow) -> None: ...

    def load(self, shard_id: str, sequence_number: str) -> SavedWindow | None: ...

    def versions(self, shard_id: str) -> list[str]:
        """Sequence numbers of the versions kept for the shard, oldest first."""
        ...

    def delete(self, shard_id: str, sequence_numbers: Sequence[str]) -> None: ...


class InMemoryWindowStateStore:
    """For tests and examples: the same rules as the DynamoDB one, in a dict."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], SavedWindow] = {}
        self._lock = threading.Lock()

    def save(self, shard_id: str, saved: SavedWindow) -> None:
        with self._lock:
            self._items[(shard_id, version_of(saved.sequence_number))] = copy.deepcopy(saved)

    def load(self, shard_id: str, sequence_number: str) -> SavedWindow | None:
        with self._lock:
            found = self._items.get((shard_id, version_of(sequence_number)))
        return copy.deepcopy(found)

    def versions(self, shard_id: str) -> list[str]:
        with self._lock:
            return sorted(seq for shard, seq in self._items if shard == shard_id)

    def delete(self, shard_id: str, sequence_numbers: Sequence[str]) -> None:
        with self._lock:
            for seq in sequence_numbers:
                self._items.pop((shard_id, version_of(seq)), None)


class DynamoDBWindowStateStore:
    """Items ``{shard: "<application>#<shard id>", sequence: <40-digit seq>, windowStart, closed,
    state (JSON)}`` in the window-state table (``Settings.window_state_table_name``)."""

    def __init__(self, client: Any, table_name: str, application: str) -> None:
        self._client = client
        self._table = table_name
        self._application = application

    def check(self) -> str | None:
        """At start-up: why the table cannot be used (None: it can)."""
        try:
            self._client.describe_table(TableName=self._table)
        except Exception as exc:
            return f"window-state table {self._table}: {exc}"
        return None

    def _key(self, shard_id: str, sequence_number: str) -> dict[str, Any]:
        return {
            "shard": {"S": f"{self._application}#{shard_id}"},
            "sequence": {"S": version_of(sequence_number)},
        }

    def save(self, shard_id: str, saved: SavedWindow) -> None:
        item = self._key(shard_id, saved.sequence_number)
        item["closed"] = {"BOOL": saved.closed}
        item["state"] = {"S": json.dumps(saved.state, separators=(",", ":"), sort_keys=True)}
        if saved.window_start is not None:
            item["windowStart"] = {"N": repr(saved.window_start)}
        self._client.put_item(TableName=self._table, Item=item)

    def load(self, shard_id: str, sequence_number: str) -> SavedWindow | None:
        item = self._client.get_item(
            TableName=self._table, Key=self._key(shard_id, sequence_number), ConsistentRead=True
        ).get("Item")
        if not item:
            return None
        start = item.get("windowStart")
        return SavedWindow(
            sequence_number,
            float(start["N"]) if start else None,
            bool(item.get("closed", {}).get("BOOL", False)),
            json.loads(item["state"]["S"]),
        )

    def versions(self, shard_id: str) -> list[str]:
        pages = self._client.get_paginator("query").paginate(
            TableName=self._table,
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "shard", "#q": "sequence"},
            ExpressionAttributeValues={":s": {"S": f"{self._application}#{shard_id}"}},
            ProjectionExpression="#q",
            ConsistentRead=True,
        )
        return sorted(item["sequence"]["S"] for page in pages for item in page.get("Items", []))

    def delete(self, shard_id: str, sequence_numbers: Sequence[str]) -> None:
        for seq in sequence_numbers:
            self._client.delete_item(TableName=self._table, Key=self._key(shard_id, seq))

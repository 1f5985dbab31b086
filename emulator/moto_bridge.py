"""Where moto's DynamoDB meets the stream engine.

moto calls ``table.stream_shard.add(old_item, new_item)`` on every item change of a stream-enabled
table (PutItem, UpdateItem, DeleteItem, BatchWriteItem, TransactWriteItems, PartiQL). We replace
that method so the change is snapshotted into the current :class:`WriteCapture` instead of moto's
single shard. The HTTP layer opens one capture per DynamoDB request and, when moto has finished,
hands each touched item's *net* change (first old state, last new state) to the engine: so an
UpdateItem that creates an item (moto: put keys, then update) is one INSERT, and a write that
changes nothing is no record at all.

Tables are discovered from moto's backends, so a stream exists (with K open shards) from the moment
the table is created, before its first write.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.table import StreamShard, Table
from moto.dynamodb.models.utilities import dynamo_json_dump

from emulator.engine import StreamEngine
from emulator.records import Image, TableShape

_local = threading.local()


def stream_arn(table: Table) -> str:
    return f"{table.table_arn}/stream/{table.latest_stream_label}"


def _streaming(table: Table) -> bool:
    spec = table.stream_specification or {}
    return bool(spec.get("StreamEnabled")) and bool(getattr(table, "latest_stream_label", None))


def _snapshot(item: Any) -> Image | None:
    """A plain-JSON copy of a moto item, immune to later in-place updates."""
    if item is None:
        return None
    attributes: Image = json.loads(dynamo_json_dump(item.to_json()["Attributes"]))
    return attributes


class WriteCapture:
    """The net change of every item touched during one request."""

    def __init__(self, user_identity: dict[str, str] | None) -> None:
        self.user_identity = user_identity
        self.changes: dict[tuple[str, str], list[Image | None]] = {}
        self.tables: dict[str, Table] = {}

    def add(self, table: Table, old: Image | None, new: Image | None) -> None:
        arn = stream_arn(table)
        present = new if new is not None else old
        if present is None:
            return
        keys = {table.hash_key_attr: present[table.hash_key_attr]}
        if table.range_key_attr is not None:
            keys[table.range_key_attr] = present[table.range_key_attr]
        key = (arn, json.dumps(keys, sort_keys=True))
        self.tables[arn] = table
        if key in self.changes:
            self.changes[key][1] = new
        else:
            self.changes[key] = [old, new]


class MotoBridge:
    """Connects moto's tables to one :class:`StreamEngine` (one bridge per process)."""

    def __init__(self, engine: StreamEngine) -> None:
        self.engine = engine

    def install(self) -> None:
        bridge = self

        def add(shard: StreamShard, old: Any, new: Any) -> None:
            bridge._on_item_change(shard.table, _snapshot(old), _snapshot(new))

        StreamShard.add = add  # type: ignore[method-assign,assignment]

    def _on_item_change(self, table: Table, old: Image | None, new: Image | None) -> None:
        capture: WriteCapture | None = getattr(_local, "capture", None)
        if capture is not None:
            capture.add(table, old, new)
            return
        single = WriteCapture(None)
        single.add(table, old, new)
        self._flush(single)

    @contextmanager
    def capture(self, user_identity: dict[str, str] | None = None) -> Iterator[WriteCapture]:
        """Collect item changes made by this thread; record their net effect on exit (even when the
        request failed half-way, since what moto changed is what the table now holds)."""
        capture = WriteCapture(user_identity)
        _local.capture = capture
        try:
            yield capture
        finally:
            _local.capture = None
            self._flush(capture)

    def _flush(self, capture: WriteCapture) -> None:
        for (arn, _), (old, new) in capture.changes.items():
            self.register(capture.tables[arn])
            self.engine.record_change(arn, old, new, capture.user_identity)

    def register(self, table: Table) -> None:
        arn = stream_arn(table)
        if self.engine.has_stream(arn):
            return
        spec = table.stream_specification or {}
        shape = TableShape(
            name=table.name,
            region=table.region_name,
            hash_key=table.hash_key_attr,
            range_key=table.range_key_attr,
            view_type=str(spec.get("StreamViewType", "NEW_AND_OLD_IMAGES")),
            unknown_fields=self.engine.config.unknown_record_fields,
        )
        self.engine.register_stream(arn, str(table.latest_stream_label), shape, list(table.schema))

    def tables(self) -> Iterator[Table]:
        """Every table moto holds, in every account and region touched so far."""
        for account in list(dict.values(dynamodb_backends)):
            for backend in list(dict.values(account)):
                yield from list(backend.tables.values())

    def sync(self) -> None:
        """Register the stream of every stream-enabled table (cheap; called before stream reads)."""
        for table in self.tables():
            if _streaming(table):
                self.register(table)

    def find_table(self, name: str) -> Table:
        for table in self.tables():
            if table.name == name:
                return table
        raise KeyError(name)

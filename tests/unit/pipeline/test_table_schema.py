"""An existing snapshot table whose columns are not the ones a run writes is refused by name.

A table outlives its settings: the key attributes in config/<env>.yaml can change after the first
run, and so can the stored item's shape between versions. Without a check the run fails deep
inside a write or a commit, or matches changes on the wrong key columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ground.settings import Settings
from pipeline.errors import SnapshotStoreError
from pipeline.snapshot_run import snapshot_tables
from pipeline.stored import schema_difference
from tests.pipeline.fixtures import settings_for


def settings(tmp: Path, **table: Any) -> Settings:
    return settings_for(tmp, table={"name": "orders", "partition_key": {"name": "pk"}, **table})


def test_the_same_settings_find_their_own_tables_again(tmp_path: Path) -> None:
    made = settings(tmp_path, sort_key={"name": "sk"})
    assert snapshot_tables(made).ensure(8) == 8
    assert snapshot_tables(made).ensure(16) == 8  # the table's own bucket count holds


def test_a_dropped_sort_key_is_named_with_what_to_do(tmp_path: Path) -> None:
    snapshot_tables(settings(tmp_path, sort_key={"name": "sk"})).ensure()
    with pytest.raises(SnapshotStoreError) as raised:
        snapshot_tables(settings(tmp_path)).ensure()
    message = str(raised.value)
    assert "orders_snapshot" in message and "pk (S)" in message
    assert "it has sk: string." in message
    assert "table.partition_key / table.sort_key" in message and "pipeline.snapshot_uri" in message


def test_a_key_attribute_of_another_type_is_refused(tmp_path: Path) -> None:
    snapshot_tables(settings(tmp_path, sort_key={"name": "sk"})).ensure()
    with pytest.raises(SnapshotStoreError, match=r"it has sk: string; lacks sk: binary\."):
        snapshot_tables(settings(tmp_path, sort_key={"name": "sk", "type": "B"})).ensure()


def test_large_and_regular_arrow_types_of_one_column_are_alike() -> None:
    """Iceberg's Arrow schema may spell strings, binaries and lists large; nullability differs."""
    written = pa.schema(
        [
            pa.field("pk", pa.string()),
            pa.field("_item", pa.map_(pa.string(), pa.struct([pa.field("ss", pa.list_(pa.binary()))]))),
        ]
    )
    read = pa.schema(
        [
            pa.field("pk", pa.large_string(), nullable=False),
            pa.field(
                "_item",
                pa.map_(pa.large_string(), pa.struct([pa.field("ss", pa.large_list(pa.large_binary()))])),
            ),
        ]
    )
    assert schema_difference(read, written) is None


def test_an_item_of_another_shape_is_a_difference() -> None:
    old = pa.schema([pa.field("_item", pa.map_(pa.string(), pa.struct([pa.field("type", pa.string())])))])
    new = pa.schema([pa.field("_item", pa.map_(pa.string(), pa.struct([pa.field("s", pa.string())])))])
    assert schema_difference(old, new) == (
        "has _item: map<string, struct<type: string>>; lacks _item: map<string, struct<s: string>>"
    )
    reordered = pa.schema([pa.field("b", pa.int32()), pa.field("a", pa.int32())])
    assert schema_difference(reordered, pa.schema(reordered.field(i) for i in (1, 0))) == (
        "has the same columns in another order"
    )

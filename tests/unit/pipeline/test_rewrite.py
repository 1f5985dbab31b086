"""Rewriting a bucket on the driver (pipeline/rewrite.py): every live row once, none of the deleted,
sorted by key."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO

from pipeline import rewrite
from pipeline.deletes import POSITION_DELETE_ARROW
from pipeline.errors import SnapshotStoreError
from pipeline.stored import BUCKET, FileTask

SCHEMA = pa.schema(
    [
        pa.field("pk", pa.string()),
        pa.field("_item", pa.map_(pa.string(), pa.struct([pa.field("s", pa.string())]))),
        pa.field(BUCKET, pa.int32()),
    ]
)
TABLE = SimpleNamespace(io=PyArrowFileIO())


def data_file(path: Path, keys: list[str], *, extra_column: bool = False) -> str:
    """A data file with the table's columns in another order (and, optionally, one more)."""
    columns = {
        BUCKET: pa.array([3] * len(keys), pa.int32()),
        "pk": keys,
        "_item": pa.array([[("v", {"s": key})] for key in keys], SCHEMA.field("_item").type),
    }
    if extra_column:
        columns["kind"] = ["items"] * len(keys)
    pq.write_table(pa.table(columns), path, row_group_size=4)
    return f"file://{path}"


def positions(named: list[tuple[str, int]]) -> pa.Table:
    return pa.table({"file_path": [p for p, _ in named], "pos": [n for _, n in named]}).cast(
        POSITION_DELETE_ARROW
    )


def delete_file(path: Path, named: list[tuple[str, int]]) -> str:
    pq.write_table(positions(named), path)
    return f"file://{path}"


def keys_in(location: str | None) -> list[str]:
    assert location is not None
    return pq.read_table(location.removeprefix("file://")).column("pk").to_pylist()


def test_live_rows_less_replaced_and_deleted_then_the_new_rows_in_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rewrite, "_BATCH_ROWS", 3)  # masks applied across several batches of a file
    first = data_file(tmp_path / "a.parquet", [f"a{i}" for i in range(10)])
    second = data_file(tmp_path / "b.parquet", ["b0", "b1", "b2"], extra_column=True)
    fresh = data_file(tmp_path / "new.parquet", ["n0", "a1"])
    older = delete_file(tmp_path / "d.parquet", [(first, 4), (first, 5), (second, 0)])
    tasks = [FileTask(first, 3, 10, ((older, 3),)), FileTask(second, 3, 3, ((older, 3),))]
    out = tmp_path / "out"
    out.mkdir()

    location = rewrite.rewrite_bucket(
        TABLE,
        tasks,
        positions([(first, 1), (first, 9)]),
        fresh=[fresh],
        schema=SCHEMA,
        keys=["pk"],
        folder=f"file://{out}",
    )

    # Sorted by key, as every file of the tables is: the kept rows and the new ones merged.
    assert keys_in(location) == ["a0", "a1", "a2", "a3", "a6", "a7", "a8", "b1", "b2", "n0"]
    written = pq.read_table(str(location).removeprefix("file://"))
    assert written.schema.names == SCHEMA.names  # the table's columns, in its order, nothing else
    assert written.column("_item").to_pylist()[0] == [("v", {"s": "a0"})]


def test_a_bucket_with_no_row_left_writes_no_file(tmp_path: Path) -> None:
    first = data_file(tmp_path / "a.parquet", ["a0", "a1"])
    out = tmp_path / "out"
    out.mkdir()
    found = rewrite.rewrite_bucket(
        TABLE,
        [FileTask(first, 3, 2)],
        positions([(first, 0), (first, 1)]),
        fresh=[],
        schema=SCHEMA,
        keys=["pk"],
        folder=str(out),
    )
    assert found is None and list(out.iterdir()) == []


def test_a_delete_past_the_end_of_its_file_is_refused(tmp_path: Path) -> None:
    first = data_file(tmp_path / "a.parquet", ["a0", "a1"])
    with pytest.raises(SnapshotStoreError, match="row 2 of a file of 2 rows"):
        rewrite.rewrite_bucket(
            TABLE,
            [FileTask(first, 3, 2)],
            positions([(first, 2)]),
            fresh=[],
            schema=SCHEMA,
            keys=["pk"],
            folder=str(tmp_path),
        )


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    with pytest.raises(SnapshotStoreError, match=r"broken\.parquet"):
        rewrite.rewrite_bucket(
            TABLE,
            [FileTask(f"file://{broken}", 3, 2)],
            None,
            fresh=[],
            schema=SCHEMA,
            keys=["pk"],
            folder=str(tmp_path),
        )


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 40), data=st.data())
def test_kept_positions_drop_exactly_the_named_rows(rows: int, data: st.DataObject) -> None:
    dropped = data.draw(st.lists(st.integers(0, max(rows - 1, 0)), max_size=rows if rows else 0))
    keep = rewrite.kept_positions(rows, np.array(dropped, dtype=np.int64))
    assert [i for i in range(rows) if keep[i]] == [i for i in range(rows) if i not in set(dropped)]


def test_an_older_delete_naming_its_file_another_way_still_drops_the_row(tmp_path: Path) -> None:
    """The rewrite drops the delete files it folds: a delete that names the data file as
    ``/tmp/…`` where the table says ``file:///tmp/…`` must still apply, or the row would come back."""
    first = data_file(tmp_path / "a.parquet", ["a0", "a1", "a2"])
    older = delete_file(tmp_path / "d.parquet", [(first.removeprefix("file://"), 1)])
    empty = data_file(tmp_path / "e.parquet", [])
    tasks = [FileTask(first, 3, 3, ((older, 1),)), FileTask(empty, 3, 0)]
    out = tmp_path / "out"
    out.mkdir()
    location = rewrite.rewrite_bucket(
        TABLE, tasks, None, fresh=[], schema=SCHEMA, keys=["pk"], folder=f"file://{out}"
    )
    assert keys_in(location) == ["a0", "a2"]


def test_a_dictionary_only_for_leaf_columns_whose_values_repeat() -> None:
    item = pa.map_(pa.string(), pa.struct([("s", pa.string()), ("n", pa.string())]))
    rows = pa.table(
        {
            "pk": [f"k{i}" for i in range(10)],  # unique: plain
            "event": ["MODIFY"] * 9 + ["INSERT"],
            "nothing": pa.array([None] * 10, pa.string()),
            "item": pa.array([[("a", {"s": "same", "n": str(i)})] for i in range(10)], item),
            "tags": [["x", "y"]] * 10,
        }
    )
    assert rewrite.dictionary_columns(rows) == [
        "event",
        "item.key_value.key",
        "item.key_value.value.s",
        "tags.list.element",
    ]

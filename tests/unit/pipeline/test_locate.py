"""Locating changed keys on the driver (pipeline/locate.py): files and deletes as a reader sees them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from pipeline.errors import SnapshotStoreError
from pipeline.locate import locate
from pipeline.reading import FILE, POS
from pipeline.stored import BUCKET, FileTask

KEYS = ["pk", "sk"]
SCHEMA = pa.schema(
    [
        pa.field("pk", pa.binary()),
        pa.field("sk", pa.string()),
        pa.field(BUCKET, pa.int32()),
        pa.field("_sequence_number", pa.string()),
        pa.field("_shard_id", pa.string()),
        pa.field("_landed_at", pa.float64()),
    ]
)
TABLE = SimpleNamespace(io=PyArrowFileIO())


def data_file(path: Path, bucket: int, pks: list[bytes]) -> str:
    """A data file as Spark writes it: more columns than a locate reads, in another order."""
    rows = pa.table(
        {
            "_item": [f"item {pk!r}" for pk in pks],
            "pk": pa.array(pks, pa.binary()),
            "sk": ["a"] * len(pks),
            "_sequence_number": [f"{i:040d}" for i in range(len(pks))],
            "_shard_id": ["shardId-1"] * len(pks),
            "_landed_at": [1.5] * len(pks),
            BUCKET: pa.array([bucket] * len(pks), pa.int32()),
        }
    )
    pq.write_table(rows, path)
    return str(path)


def wanted(*keys: tuple[int, bytes]) -> pa.Table:
    return pa.table(
        {
            BUCKET: pa.array([b for b, _ in keys], pa.int32()),
            "pk": pa.array([k for _, k in keys], pa.binary()),
            "sk": ["a"] * len(keys),
        }
    )


def found(rows: pa.Table) -> list[tuple[bytes, int, int]]:
    return sorted((r["pk"], r[FILE], r[POS]) for r in rows.to_pylist())


def test_the_changed_keys_live_rows_are_found_with_their_file_and_position(tmp_path: Path) -> None:
    zero = data_file(tmp_path / "b0.parquet", 0, [b"\x00a", b"\x00b", b"\x00c"])
    patch = data_file(tmp_path / "b0-patch.parquet", 0, [b"\x00b"])  # b's newer row; the old one deleted
    one = data_file(tmp_path / "b1.parquet", 1, [b"\xffx", b"\xffy"])
    deletes = str(tmp_path / "deletes.parquet")
    elsewhere = str(tmp_path / "not-read.parquet")  # a delete file may also name files not read here
    pq.write_table(pa.table({"file_path": [zero, elsewhere], "pos": pa.array([1, 0], pa.int64())}), deletes)
    tasks = [
        FileTask(zero, 0, 3, ((deletes, 1),)),
        FileTask(patch, 0, 1, ((deletes, 1),)),
        FileTask(one, 1, 2),
    ]
    rows = locate(
        TABLE, tasks, wanted((0, b"\x00b"), (0, b"\x00c"), (1, b"\xffy"), (1, b"none")), KEYS, SCHEMA
    )
    # b's deleted row is not live; c and y where they are; the key without a row, nowhere.
    assert found(rows) == [(b"\x00b", 1, 0), (b"\x00c", 0, 2), (b"\xffy", 2, 1)]
    assert rows.schema.names == [*SCHEMA.names, FILE, POS]
    order = {r["pk"]: r["_sequence_number"] for r in rows.to_pylist()}
    assert order == {b"\x00b": f"{0:040d}", b"\x00c": f"{2:040d}", b"\xffy": f"{1:040d}"}


def test_a_key_is_looked_for_only_in_its_own_bucket(tmp_path: Path) -> None:
    """Buckets are a function of the key: a row of the key in another bucket's file is not its row."""
    zero = data_file(tmp_path / "b0.parquet", 0, [b"k"])
    rows = locate(TABLE, [FileTask(zero, 0, 1)], wanted((1, b"k")), KEYS, SCHEMA)
    assert rows.num_rows == 0


def test_no_changed_keys_or_no_files_find_nothing(tmp_path: Path) -> None:
    zero = data_file(tmp_path / "b0.parquet", 0, [b"k"])
    assert locate(TABLE, [FileTask(zero, 0, 1)], wanted(), KEYS, SCHEMA).num_rows == 0
    assert locate(TABLE, [], wanted((0, b"k")), KEYS, SCHEMA).num_rows == 0


def test_a_data_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    gone = str(tmp_path / "gone.parquet")
    with pytest.raises(SnapshotStoreError, match="gone.parquet"):
        locate(TABLE, [FileTask(gone, 0, 1)], wanted((0, b"k")), KEYS, SCHEMA)


def test_an_unreadable_delete_file_is_named(tmp_path: Path) -> None:
    zero = data_file(tmp_path / "b0.parquet", 0, [b"k"])
    gone = str(tmp_path / "gone-deletes.parquet")
    with pytest.raises(SnapshotStoreError, match="gone-deletes.parquet"):
        locate(TABLE, [FileTask(zero, 0, 1, ((gone, 1),))], wanted((0, b"k")), KEYS, SCHEMA)


def test_a_corrupt_data_file_or_one_without_a_column_is_named(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 not really parquet PAR1")
    with pytest.raises(SnapshotStoreError, match="corrupt.parquet"):
        locate(TABLE, [FileTask(str(corrupt), 0, 1)], wanted((0, b"k")), KEYS, SCHEMA)
    narrow = str(tmp_path / "narrow.parquet")
    pq.write_table(pa.table({"pk": pa.array([b"k"], pa.binary()), "sk": ["a"]}), narrow)
    with pytest.raises(SnapshotStoreError, match="narrow.parquet"):
        locate(TABLE, [FileTask(narrow, 0, 1)], wanted((0, b"k")), KEYS, SCHEMA)

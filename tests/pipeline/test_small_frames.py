"""The driver's small frames (file ids, watermarks, located rows) reach Spark, and small results come
back, the same way on PySpark 4 (Arrow tables) and on EMR's PySpark 3.5 (rows and a schema), and an
incremental run works either way."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from pipeline import reading
from pipeline.reading import small_frame, to_arrow
from pipeline.snapshot_run import read_snapshot, run_snapshot
from tests.pipeline.fixtures import change, settings_for, write_object

pytestmark = [pytest.mark.spark, pytest.mark.emr]
P = "shardId-00000001-parent"
# Arrow tables both ways where the installed PySpark has them (4.x); EMR's 3.5 takes rows only.
ARROW = [
    pytest.param(
        True, marks=pytest.mark.skipif(not reading.ARROW_TABLES, reason="PySpark 3.5 has no Arrow tables")
    ),
    False,
]


@pytest.mark.parametrize("arrow", ARROW)
def test_a_small_frame_has_the_arrow_types_and_rows(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, arrow: bool
) -> None:
    monkeypatch.setattr(reading, "ARROW_TABLES", arrow)
    frame = small_frame(
        spark,
        {
            "path": pa.array(["file:/a b/x", "s3://b/y"], pa.string()),
            "id": pa.array([0, 7], pa.int32()),
            "pos": pa.array([3, 2**40], pa.int64()),
        },
    )
    assert frame.schema.simpleString() == "struct<path:string,id:int,pos:bigint>"
    assert sorted(tuple(r) for r in frame.collect()) == [("file:/a b/x", 0, 3), ("s3://b/y", 7, 2**40)]


@pytest.mark.parametrize("arrow", ARROW)
def test_a_small_frame_of_chunks_some_empty_keeps_every_row(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, arrow: bool
) -> None:
    """Rows found file by file: a part per file, most of them empty (PySpark 4.3 loses a batch that
    follows two empty ones); column names as DynamoDB allows them, which DDL text would not."""
    monkeypatch.setattr(reading, "ARROW_TABLES", arrow)
    schema = pa.schema([("user-id", pa.binary()), ("landed at", pa.float64())])
    one = pa.table({"user-id": [b"\x00a"], "landed at": [1.5]}, schema=schema)
    two = pa.table({"user-id": [b"\xffb"], "landed at": [None]}, schema=schema)
    parts = pa.concat_tables([one, schema.empty_table(), schema.empty_table(), two, schema.empty_table()])
    frame = small_frame(spark, {name: parts.column(name) for name in parts.column_names})
    assert frame.schema.simpleString() == "struct<user-id:binary,landed at:double>"
    rows = sorted((bytes(r["user-id"]), r["landed at"]) for r in frame.collect())
    assert rows == [(b"\x00a", 1.5), (b"\xffb", None)]


@pytest.mark.parametrize("arrow", ARROW)
def test_a_small_frame_comes_back_to_the_driver_as_arrow_of_its_types(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, arrow: bool
) -> None:
    monkeypatch.setattr(reading, "ARROW_TABLES", arrow)
    frame = spark.createDataFrame(
        [("a", 1, 2**40, None, b"\x00"), ("b", 2, 3, 1.5, b"\xff")],
        "path string, id int, pos bigint, landed double, key binary",
    )
    table = to_arrow(frame)
    assert table.schema.types == [pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.binary()]
    assert sorted(tuple(r.values()) for r in table.to_pylist()) == [
        ("a", 1, 2**40, None, b"\x00"),
        ("b", 2, 3, 1.5, b"\xff"),
    ]
    assert to_arrow(frame.filter("id > 2")).num_rows == 0


def test_an_incremental_run_without_arrow_tables_patches_as_with_them(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reading, "ARROW_TABLES", False)
    settings = settings_for(tmp_path, rewrite_deleted_share=1.0, max_files_per_bucket=1000)
    log = tmp_path / "changelog"
    write_object(log, [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, 31)])
    run_snapshot(spark, settings, buckets=2)
    write_object(
        log, [change(P, 40, "MODIFY", "k2", image={"n": {"N": "40"}}), change(P, 41, "REMOVE", "k3")]
    )
    second = run_snapshot(spark, settings)
    write_object(log, [change(P, 50, "MODIFY", "k4", image={"n": {"N": "50"}})])
    third = run_snapshot(spark, settings)  # reads the delete files the second run wrote
    assert second.buckets_patched == second.buckets_changed and third.new_changes == 1
    items = {r["pk"]: r["_item"]["n"]["n"] for r in read_snapshot(spark, settings).collect()}
    assert items == {**{f"k{i}": str(i) for i in range(1, 31) if i != 3}, "k2": "40", "k4": "50"}

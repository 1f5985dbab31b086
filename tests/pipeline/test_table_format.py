"""The snapshot is an Iceberg table in a catalog: readers need none of our code, only its name."""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from pipeline.snapshot_run import run_snapshot, snapshot_tables
from tests.pipeline.fixtures import change, settings_for, write_object

pytestmark = pytest.mark.spark
P = "shardId-00000001"


def test_iceberg_readers_and_duckdb_see_the_items_by_table_name(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    write_object(
        tmp_path / "changelog",
        [
            change(P, 1, "INSERT", "a", image={"amount": {"N": "1.50"}}),
            change(P, 2, "INSERT", "b", image={"amount": {"N": "2"}}),
            change(P, 3, "REMOVE", "b"),
            change(P, 4, "INSERT", "c", image={"amount": {"N": "3"}, "tags": {"SS": ["x"]}}),
        ],
    )
    run_snapshot(spark, settings)
    write_object(tmp_path / "changelog", [change(P, 5, "MODIFY", "a", image={"amount": {"N": "9"}})])
    run_snapshot(spark, settings)

    # PyIceberg, configured only with the catalog's name and location: the catalog names the tables.
    root = tmp_path / "snapshot"
    catalog = SqlCatalog(
        "consumer", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=(root / "warehouse").as_uri()
    )
    assert ("orders_stream_consumer_local", "orders_snapshot") in catalog.list_tables(
        "orders_stream_consumer_local"
    )
    table = catalog.load_table("orders_stream_consumer_local.orders_snapshot")
    rows = table.scan(selected_fields=("pk", "_item")).to_arrow().to_pylist()
    assert sorted((r["pk"], dict(r["_item"])["amount"]["n"]) for r in rows) == [("a", "9"), ("c", "3")]
    assert len(table.history()) >= 2  # every run is an Iceberg snapshot (time travel works)

    # DuckDB, by table name, in SQL.
    connection = table.scan().to_duckdb("orders_snapshot")
    found = connection.execute(
        "SELECT pk, _item['amount'].n AS amount, _item['tags'].ss AS tags FROM orders_snapshot ORDER BY pk"
    ).fetchall()
    assert found == [("a", "9", None), ("c", "3", ["x"])]
    assert isinstance(connection, duckdb.DuckDBPyConnection)


@pytest.mark.parametrize("copies", [False, True], ids=["window", "aggregation"])
def test_each_bucket_is_one_file_sorted_by_key(spark: SparkSession, tmp_path: Path, copies: bool) -> None:
    """A rebuild writes one file per bucket and table, its rows in key order, though the log holds
    the keys shuffled and one task holds every bucket (the suite's session has one shuffle
    partition), whichever merge it takes: the window, or the aggregation when an object's name says
    nothing of its range (so copies of a change are possible); an incremental run's new files are
    in key order too."""
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    order = random.Random(3).sample(range(400), 400)
    inserts = [change(P, i + 1, "INSERT", f"k{key:03d}", sk=f"s{key % 7}") for i, key in enumerate(order)]
    removes = [
        change(P, 500 + i, "REMOVE", f"k{key:03d}", sk=f"s{key % 7}") for i, key in enumerate(order[:90])
    ]
    write_object(log, inserts + removes)
    if copies:  # a copy of the log under a name that says nothing of its range
        first = write_object(tmp_path / "copy", inserts + removes)
        (log / P / "copy.jsonl.gz").write_bytes(first.read_bytes())
    built = run_snapshot(spark, settings, full=True, buckets=16)
    assert built.lines == (980 if copies else 490)
    # The window counts every line a change; the aggregation (copies possible) counts fewer.
    assert (built.new_changes < built.lines) if copies else (built.new_changes == 490)
    tables = snapshot_tables(settings)

    def files_in_key_order(name: str) -> dict[int, int]:
        per_bucket: dict[int, int] = {}
        for task in tables.tasks(name):
            per_bucket[task.bucket] = per_bucket.get(task.bucket, 0) + 1
            rows = pq.read_table(task.path.removeprefix("file://"), columns=["pk", "sk"]).to_pylist()
            keys = [(row["pk"], row["sk"]) for row in rows]
            assert keys == sorted(keys), task.path
        return per_bucket

    items, tombstones = files_in_key_order(tables.items_name), files_in_key_order(tables.tombstones_name)
    assert len(items) == 16 and set(items.values()) == {1}
    assert len(tombstones) > 1 and set(tombstones.values()) == {1}
    write_object(
        log,
        [change(P, 1000 + i, "MODIFY", f"k{key:03d}", sk=f"s{key % 7}") for i, key in enumerate(order[200:])],
    )
    run_snapshot(spark, settings)
    files_in_key_order(tables.items_name)

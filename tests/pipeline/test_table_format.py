"""The snapshot is an Iceberg table in a catalog: readers need none of our code, only its name."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from pipeline.snapshot_run import run_snapshot
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

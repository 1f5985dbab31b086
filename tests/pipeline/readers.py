"""How the pipeline tests read a snapshot table back: through our reader, PyIceberg's scan and
DuckDB (each applies the position deletes itself), and the settings that force a patch or a rewrite."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from pipeline.schemas import ITEM_COLUMN
from pipeline.snapshot_run import read_snapshot, snapshot_tables
from pipeline.table import SnapshotTables

PATCH = {"rewrite_deleted_share": 1.0, "max_files_per_bucket": 1000}  # patch every bucket holding rows
REWRITE = {"rewrite_deleted_share": 0.01}  # rewrite every changed bucket


def ours(spark: SparkSession, settings: Any) -> dict[str, str]:
    return {r["pk"]: r[ITEM_COLUMN]["n"]["n"] for r in read_snapshot(spark, settings).collect()}


def iceberg(settings: Any) -> dict[str, str]:
    """The snapshot table through PyIceberg's own scan (it applies the position deletes itself)."""
    tables = snapshot_tables(settings)
    table = tables.items_table()
    assert table is not None
    rows = table.scan(selected_fields=("pk", ITEM_COLUMN)).to_arrow().to_pylist()
    return {r["pk"]: dict(r[ITEM_COLUMN])["n"]["n"] for r in rows}


def duckdb_rows(settings: Any) -> dict[str, str]:
    table = snapshot_tables(settings).items_table()
    assert table is not None
    connection = table.scan().to_duckdb("snap")
    return dict(connection.execute("SELECT pk, _item['n'].n FROM snap").fetchall())


def delete_files(tables: SnapshotTables, name: str) -> set[str]:
    return {path for task in tables.tasks(name) for path, _ in task.deletes}

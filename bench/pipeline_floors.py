"""The floors the snapshot job's full rebuild is measured against (bench/pipeline_table.py): the
plain PySpark job a Spark user would write for the same result, and DuckDB doing the same merge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline.schemas import CHANGELOG_LINE

MERGES = ("window", "max_by")


def plain_job(spark: SparkSession, files: list[str], out: Path, catalog: Any, *, merge: str) -> int:
    """What a Spark user writes for the same result: read the change log with its schema, keep each
    key's newest change by the integer sequence number (a ``row_number() = 1`` window, or
    ``max_by``), drop the REMOVEs, write Parquet into a new folder and register it in the catalog
    as the table's content (PyIceberg ``add_files``, the old files out in the same commit: a Spark
    job without Iceberg's runtime jar has no other way in). Returns the rows the table then holds."""
    from pyiceberg.expressions import AlwaysTrue

    line = F.from_json("value", CHANGELOG_LINE).alias("j")
    rows = (
        spark.read.text(files)
        .select(line)
        .select(
            F.col("j.keys")["pk"]["S"].alias("pk"),
            F.col("j.keys")["sk"]["S"].alias("sk"),
            F.col("j.sequenceNumber").cast("decimal(38,0)").alias("seq"),
            F.col("j.eventName").alias("event"),
            F.col("j.newImage").alias("item"),
        )
    )
    if merge == "window":
        newest = Window.partitionBy("pk", "sk").orderBy(F.col("seq").desc())
        latest = rows.withColumn("r", F.row_number().over(newest)).filter(F.col("r") == 1)
    else:
        latest = rows.groupBy("pk", "sk").agg(F.max_by(F.struct("event", "item"), "seq").alias("l"))
        latest = latest.select("pk", "sk", "l.event", "l.item")
    latest.filter(F.col("event") != "REMOVE").select("pk", "sk", "item").write.parquet(str(out))
    paths = [f"file://{p}" for p in sorted(out.glob("*.parquet"))]
    name = "plain.orders"
    if not catalog.table_exists(name):
        catalog.create_namespace_if_not_exists("plain")
        catalog.create_table(name, schema=pq.read_schema(paths[0].removeprefix("file://")))
    table = catalog.load_table(name)
    with table.transaction() as tx:
        tx.delete(AlwaysTrue())
        tx.add_files(paths)
    summary = catalog.load_table(name).current_snapshot().summary
    return int(summary.additional_properties["total-records"])


def duckdb_job(files: list[str], out: str) -> int:
    import duckdb

    connection = duckdb.connect()
    try:
        connection.execute("SET threads = 2")
        listing = ", ".join(f"'{f}'" for f in files)
        connection.execute(
            f"""
            COPY (
              SELECT keys->'pk'->>'S' AS pk, keys->'sk'->>'S' AS sk, newImage AS item
              FROM read_json([{listing}], format = 'newline_delimited', compression = 'gzip',
                   columns = {{'eventName': 'VARCHAR', 'sequenceNumber': 'VARCHAR',
                               'keys': 'JSON', 'newImage': 'JSON'}})
              QUALIFY row_number() OVER (
                PARTITION BY keys->'pk'->>'S', keys->'sk'->>'S'
                ORDER BY CAST(sequenceNumber AS HUGEINT) DESC) = 1
                AND eventName <> 'REMOVE'
            ) TO '{out}' (FORMAT parquet)
            """
        )
        counted = connection.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()
        return int(counted[0]) if counted else 0
    finally:
        connection.close()

"""The floors the snapshot job's full rebuild is measured against (bench/pipeline_table.py): two
plain PySpark jobs for the same result — the bench's own (``plain_job``: text lines and
``from_json``, registered in an Iceberg table) and the one a Spark user writes first
(``user_job``: the JSON reader, Parquet out) — DuckDB doing the same merge, and the check that
each floor's table holds what the snapshot job's does (``same_items``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline.schemas import CHANGELOG_LINE, WIRE_ITEM

MERGES = ("window", "max_by")
# What a user who knows the change log's format declares: the fields the merge needs, the table's
# two key attributes by name, and the images in DynamoDB JSON's own shape (the same attribute
# struct the snapshot stores, so both tables hold the same typed items).
USER_SCHEMA = T.StructType(
    [
        T.StructField("eventName", T.StringType()),
        T.StructField("sequenceNumber", T.StringType()),
        T.StructField(
            "keys",
            T.StructType(
                [
                    T.StructField(name, T.StructType([T.StructField("S", T.StringType())]))
                    for name in ("pk", "sk")
                ]
            ),
        ),
        T.StructField("newImage", WIRE_ITEM),
    ]
)


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


def user_job(spark: SparkSession, files: list[str], out: Path) -> None:
    """The job a Spark user writes first for the current state: the JSON reader with an explicit
    schema of the fields it needs, each key's newest change by a ``row_number() = 1`` window
    ordered by the sequence number as an integer (``decimal(38,0)``), REMOVEs dropped, Parquet
    out. No validation, no bookkeeping columns, no tombstones, no layout, no table format."""
    changes = (
        spark.read.schema(USER_SCHEMA)
        .json(files)
        .select(
            F.col("keys.pk.S").alias("pk"),
            F.col("keys.sk.S").alias("sk"),
            F.col("sequenceNumber").cast("decimal(38,0)").alias("seq"),
            F.col("eventName").alias("event"),
            F.col("newImage").alias("item"),
        )
    )
    newest = Window.partitionBy("pk", "sk").orderBy(F.col("seq").desc())
    latest = changes.withColumn("r", F.row_number().over(newest)).filter(
        (F.col("r") == 1) & (F.col("event") != "REMOVE")
    )
    latest.select("pk", "sk", "item").write.parquet(str(out))


def parquet_rows(folder: Path) -> int:
    """Rows in the Parquet files of a floor's output folder (from their footers)."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in folder.glob("*.parquet"))


def _folded(items: pa.ChunkedArray) -> pa.Array:
    """A ``map<string, struct>`` column with its struct's field names in lower case: the snapshot
    stores the wire's attribute struct (``S``, ``N``, ...) under the names readers expect."""
    whole = pa.concat_arrays(items.chunks)
    values = whole.items
    renamed = pa.StructArray.from_arrays(
        [values.field(i) for i in range(values.type.num_fields)],
        names=[field.name.lower() for field in values.type],
        mask=values.is_null(),
    )
    return pa.MapArray.from_arrays(whole.offsets, whole.keys, renamed)


def same_items(snapshot: Any, floor: Path) -> int:
    """Check that a floor's Parquet (``pk``, ``sk``, ``item`` in the wire's attribute shape) holds
    exactly the snapshot table's items (PyIceberg's scan of it), key for key and value for value;
    returns the item count. An AssertionError names the first keys that differ."""
    ours = snapshot.scan(selected_fields=("pk", "sk", "_item")).to_arrow()
    theirs = pq.ParquetDataset(str(floor)).read(columns=["pk", "sk", "item"])
    theirs = pa.table({"pk": theirs["pk"], "sk": theirs["sk"], "_item": _folded(theirs["item"])})
    ours = ours.select(["pk", "sk", "_item"]).cast(theirs.schema)
    order = [("pk", "ascending"), ("sk", "ascending")]
    ours, theirs = ours.sort_by(order).combine_chunks(), theirs.sort_by(order).combine_chunks()
    if ours.equals(theirs):
        return int(ours.num_rows)

    def rows(table: pa.Table) -> dict[tuple[str, str], Any]:
        found: dict[tuple[str, str], Any] = {}
        for row in table.to_pylist():
            if found.setdefault((row["pk"], row["sk"]), row["_item"]) is not row["_item"]:
                raise AssertionError(f"{floor}: {row['pk']!r}, {row['sk']!r} twice")
        return found

    expected, got = rows(ours), rows(theirs)
    missing = sorted(set(expected) - set(got))[:3]
    extra = sorted(set(got) - set(expected))[:3]
    different = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])[:3]
    raise AssertionError(
        f"{floor}: {len(got)} items against the snapshot's {len(expected)}; missing {missing}, "
        f"extra {extra}, different {different}"
    )


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

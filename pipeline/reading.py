"""Reading the snapshot's Iceberg tables with Spark, without Spark's Iceberg runtime.

PyIceberg plans the scan (which data files are live, which position delete files apply to each,
see :meth:`pipeline.table.SnapshotTables.tasks`); Spark reads the Parquet files with an explicit
schema and drops the deleted rows with one broadcast anti-join on (data file, row position). A
row's position is Spark's ``_metadata.row_index``: its 0-based number in its file, which is what a
position delete names.

Files are joined by a small integer id, not by path: the two sides spell a path differently
(Iceberg keeps the path it was given, ``file:///tmp/a b/x``; Spark reports a percent-encoded URI,
``file:/tmp/a%20b/x``), and comparing long strings per row costs more than the read. The id of
each of Spark's names is worked out once per read on the driver, from the names Spark lists
(``DataFrame.inputFiles``, no job), and a row whose file has no id fails the job loudly rather than
vanish from the table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline.errors import SnapshotStoreError
from pipeline.storage import spark_uri
from pipeline.stored import FileTask, arrow_schema

FILE = "_file"  # which data file a row was read from: its index in the tasks read
POS = "_pos"  # the row's 0-based position in that file
_RAW = "_file_name"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/*|^/+")


def path_key(path: str) -> str:
    """A path without scheme or leading slashes: how both sides' names are compared."""
    return _SCHEME.sub("", path)


def _file_ids(spark_names: Sequence[str], paths: Sequence[str]) -> dict[str, int]:
    """Each name Spark may report for a file (``file:///x`` and ``file:/x``) → the file's index in
    ``paths`` (the tables' own spelling)."""
    index = {path_key(path): i for i, path in enumerate(paths)}
    ids: dict[str, int] = {}
    for name in spark_names:
        found = index.get(path_key(unquote(name)))
        if found is None:
            raise SnapshotStoreError(f"Spark reads a file the table does not list: {name}")
        ids[name] = found
        ids[re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*:)/+", r"\1/", name)] = found  # _metadata's spelling
    return ids


# ``createDataFrame(pyarrow.Table)`` is PySpark 4's; EMR's PySpark 3.5 gets rows and a schema.
ARROW_TABLES = int(pyspark.__version__.split(".")[0]) >= 4
_SPARK_TYPES: dict[pa.DataType, T.DataType] = {
    pa.string(): T.StringType(),
    pa.binary(): T.BinaryType(),
    pa.int32(): T.IntegerType(),
    pa.int64(): T.LongType(),
    pa.float64(): T.DoubleType(),
}


def small_frame(spark: SparkSession, columns: dict[str, pa.Array | pa.ChunkedArray]) -> DataFrame:
    """A small table the driver holds (file ids, watermarks, located rows) as a DataFrame, through
    Arrow: the JVM reads it as it is, where a list of tuples is unpickled by a job of Python
    workers (about a tenth of a second each, several per incremental run). Columns of string,
    binary, int32, int64 or float64.

    Chunked columns are combined first: PySpark 4.3 drops the rows of a batch that follows two
    empty ones (a table concatenated from per-file parts, some of them empty, has such batches)."""
    table = pa.table(columns).combine_chunks()
    if ARROW_TABLES:
        return spark.createDataFrame(table)
    # A schema, not DDL text: key attributes may be named anything (``user-id``, ``order id``).
    schema = T.StructType([T.StructField(f.name, _SPARK_TYPES[f.type]) for f in table.schema])
    return spark.createDataFrame(list(zip(*(c.to_pylist() for c in table.columns), strict=True)), schema)


def to_arrow(frame: DataFrame) -> pa.Table:
    """A small frame's rows on the driver, as Arrow: ``toArrow`` on PySpark 4; EMR's PySpark 3.5
    has none and collects rows (slower, but no pandas, whose 3.x PySpark 3.5 predates)."""
    if ARROW_TABLES:
        return frame.toArrow()
    rows = [row.asDict() for row in frame.collect()]
    return pa.Table.from_pylist(rows, schema=arrow_schema(frame.schema))


def read_files(spark: SparkSession, schema: Any, files: Sequence[str]) -> DataFrame:
    """Parquet files with an explicit schema (no inference); no files: an empty frame."""
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*[spark_uri(f) for f in files])


def read_live(
    spark: SparkSession,
    schema: Any,
    tasks: Sequence[FileTask],
    *,
    columns: Sequence[str] | None = None,
    locate: bool = False,
    only: DataFrame | None = None,
    keys: Sequence[str] = (),
    numbering: Sequence[FileTask] | None = None,
    also_deleted: DataFrame | None = None,
) -> DataFrame:
    """The rows a reader of the table sees: the tasks' data files minus their position deletes.

    ``columns`` narrows the read (Parquet reads only those); ``locate`` adds :data:`FILE` (the
    data file's index in ``numbering``, by default ``tasks``) and :data:`POS`, the two things a
    position delete of the row names; ``only`` (a small frame of ``keys``) keeps the rows of those
    keys before anything else is done per row: a patch locates a few keys among millions of rows.
    ``also_deleted`` (:data:`FILE`, :data:`POS`, numbered the same way) drops more rows: those a
    run replaces in a bucket it rewrites.
    """
    names = list(columns) if columns is not None else schema.fieldNames()
    paths = [task.path for task in tasks]
    numbered = [task.path for task in (numbering if numbering is not None else tasks)]
    deletes = sorted({path for task in tasks for path, _ in task.deletes})
    if not tasks:
        frame = spark.createDataFrame([], schema).select(*names)
        if locate:
            frame = frame.withColumn(FILE, F.lit(None).cast("int")).withColumn(POS, F.lit(None).cast("long"))
        return frame
    rows = read_files(spark, schema, paths)
    if not deletes and not locate and also_deleted is None:
        return _keep(rows.select(*names), only, keys)
    ids = _file_ids(rows.inputFiles(), numbered)
    spellings = sorted(ids)
    names_to_ids = small_frame(
        spark,
        {_RAW: pa.array(spellings, pa.string()), FILE: pa.array([ids[n] for n in spellings], pa.int32())},
    )
    located = (
        _keep(
            rows.select(
                *names, F.col("_metadata.file_path").alias(_RAW), F.col("_metadata.row_index").alias(POS)
            ),
            only,
            keys,
        )
        .join(F.broadcast(names_to_ids), _RAW, "left")
        .withColumn(
            FILE,
            F.when(
                F.col(FILE).isNull(),
                F.raise_error(F.concat(F.lit("a row of a file the table does not list: "), F.col(_RAW))),
            ).otherwise(F.col(FILE)),
        )
        .drop(_RAW)
    )
    gone: DataFrame | None = None
    if deletes:
        by_path = small_frame(
            spark,
            {"file_path": pa.array(numbered, pa.string()), FILE: pa.array(range(len(numbered)), pa.int32())},
        )
        gone = (
            read_files(spark, "file_path string, pos long", deletes)
            .join(F.broadcast(by_path), "file_path")
            .select(FILE, F.col("pos").alias(POS))
        )
    if also_deleted is not None:
        more = also_deleted.select(FILE, POS)
        gone = more if gone is None else gone.unionByName(more)
    if gone is not None:
        located = located.join(F.broadcast(gone), [FILE, POS], "left_anti")
    return located if locate else located.select(*names)


def _keep(rows: DataFrame, only: DataFrame | None, keys: Sequence[str]) -> DataFrame:
    return rows if only is None else rows.join(F.broadcast(only), list(keys), "left_semi")

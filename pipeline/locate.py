"""Finding the live rows an incremental run replaces, on the driver with PyArrow, when they are few.

A patch must know, for every changed key, the live row it replaces: the data file and the row's
position in it (what a position delete names) and the columns that order changes. That means
reading the key and order columns of every row in the touched buckets and keeping the changed
keys' rows. Spark does it well on a cluster, but on one machine the rows are not where the time
goes: a table of a million items spread over 16 buckets holds ~250 files after a few dozen runs
(a small file per patch), and Spark pays 2 to 2.5 ms to open each one, plus a job and its broadcasts.
PyArrow reads the same 1.1 M rows' columns from the same files in about a third of that on this
machine (bench/pipeline_table.py).

So a run whose touched buckets hold at most :data:`DRIVER_ROWS` rows locates on the driver; a
larger one leaves it to Spark's executors (:func:`pipeline.reading.read_live`), which read in
parallel what one driver would read alone. Memory stays small either way: each thread holds one
file's few columns at a time and keeps only the changed keys' rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.deletes import read_position_deletes
from pipeline.errors import SnapshotStoreError
from pipeline.reading import FILE, POS
from pipeline.stored import BUCKET, FileTask

DRIVER_ROWS = 5_000_000  # above this many rows in the touched buckets, Spark locates
_THREADS = 8  # reads wait on storage (S3) as much as on the CPU: a few more threads than cores


def locate(
    table: Any,
    tasks: Sequence[FileTask],
    wanted: pa.Table,
    keys: Sequence[str],
    schema: pa.Schema,
) -> pa.Table:
    """The live rows of ``wanted``'s keys in ``tasks``' data files: ``schema``'s columns (keys,
    bucket, order columns) plus :data:`FILE` (the file's index in ``tasks``) and :data:`POS`.

    ``table`` is an Iceberg table whose file IO reads the files (local disk or S3); ``wanted``
    holds the changed keys and their bucket, one row per key. Rows deleted by the tasks' position
    deletes are left out, as a reader of the table would.
    """
    out = pa.schema([*schema, pa.field(FILE, pa.int32()), pa.field(POS, pa.int64())])
    wanted = wanted.select([BUCKET, *keys]).cast(pa.schema([schema.field(n) for n in (BUCKET, *keys)]))
    per_bucket = {
        int(bucket): wanted.filter(pc.equal(wanted.column(BUCKET), bucket)).select(list(keys))
        for bucket in pc.unique(wanted.column(BUCKET)).to_pylist()
    }
    columns = [field.name for field in schema]

    def found_in(index: int) -> pa.Table:
        task = tasks[index]
        chosen = per_bucket.get(task.bucket)
        if chosen is None or task.rows == 0:
            return out.empty_table()
        # ArrowInvalid (a corrupt file) is a ValueError, as is a cast that misses a column (the
        # reader skips names a file lacks).
        try:
            with table.io.new_input(task.path).open() as stream:
                rows = pq.ParquetFile(stream).read(columns=columns).cast(schema)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise SnapshotStoreError(f"cannot read the snapshot's data file {task.path}: {exc}") from exc
        rows = rows.append_column(POS, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        kept = rows.join(chosen, list(keys), join_type="left semi")
        return kept.append_column(FILE, pa.array(np.full(kept.num_rows, index, dtype=np.int32))).select(
            out.names
        )

    with ThreadPoolExecutor(max_workers=_THREADS) as pool:
        futures = [pool.submit(found_in, index) for index in range(len(tasks))]
        try:
            parts = [future.result() for future in futures]
        except BaseException:
            for future in futures:  # the first failure ends the read: no waiting for the rest
                future.cancel()
            raise
    found = pa.concat_tables([out.empty_table(), *parts])
    deletes = sorted({path for task in tasks for path, _ in task.deletes})
    if not deletes or found.num_rows == 0:
        return found
    gone = read_position_deletes(table, deletes)
    ids = pc.index_in(gone.column("file_path"), value_set=pa.array([task.path for task in tasks]))
    named = pa.table({FILE: pc.cast(ids, pa.int32()), POS: gone.column("pos")}).filter(pc.is_valid(ids))
    return found.join(named, [FILE, POS], join_type="left anti").select(out.names)

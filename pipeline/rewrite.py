"""Rewriting a bucket (copy-on-write) on the driver with PyArrow, when its rows are few.

A bucket that reached its limits (:mod:`pipeline.layout`) is written again without its deleted
rows: the rows its older position deletes name, and the rows this run replaces. Done by Spark, its
rows make a round trip no patch needs: read with the whole item, shuffled to the bucket's task,
written again. For one bucket of a million-item table (62 500 rows) that cost 1.2 to 2.5 s here,
where the rest of the run took about 4; PyArrow reads, filters and writes the same rows on the
driver in a fraction of that (bench/pipeline_table.py), with no job and no shuffle.

The old rows are copied as they are, batch by batch (memory: one record batch at a time, whatever
the bucket's size), into one new file per bucket and table, followed by the bucket's new rows from
the file Spark wrote for them (which the caller then drops): a rewritten bucket still holds one
file. A run whose rewritten buckets hold more than :data:`DRIVER_REWRITE_ROWS` rows leaves the
rewrite to Spark, whose executors share it (:func:`pipeline.jobs._merge_incremental`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.deletes import read_position_deletes
from pipeline.errors import SnapshotStoreError
from pipeline.reading import path_key
from pipeline.storage import join
from pipeline.table import FileTask

DRIVER_REWRITE_ROWS = 2_000_000  # above this many rows in the rewritten buckets, Spark rewrites
_BATCH_ROWS = 65_536
THREADS = 4  # buckets rewritten at once (storage waits as much as the CPU works)


def kept_positions(rows: int, dropped: np.ndarray) -> np.ndarray:
    """A mask over a file's ``rows`` rows: False at the positions in ``dropped`` (out of range
    positions are an error: a delete naming a row the file does not have means the table and the
    run disagree about the file, and copying it anyway could resurrect or lose a row)."""
    keep = np.ones(rows, dtype=bool)
    if dropped.size:
        outside = dropped[(dropped < 0) | (dropped >= rows)]
        if outside.size:
            raise SnapshotStoreError(
                f"a delete names row {int(outside[0])} of a file of {rows} rows: the table changed under the run"
            )
        keep[dropped] = False
    return keep


def positions_by_file(positions: pa.Table) -> dict[str, np.ndarray]:
    """Rows of ``(file_path, pos)`` → each file path's positions, in one grouping pass."""
    grouped = positions.group_by("file_path").aggregate([("pos", "list")])
    return {
        path: np.asarray(found, dtype=np.int64)
        for path, found in zip(
            grouped.column("file_path").to_pylist(), grouped.column("pos_list").to_pylist(), strict=True
        )
    }


def rewrite_bucket(
    table: Any,
    tasks: Sequence[FileTask],
    replaced: pa.Table | None,
    *,
    fresh: Sequence[str],
    schema: pa.Schema,
    folder: str,
) -> str | None:
    """One bucket's live rows, less the rows this run ``replaced`` (``file_path``, ``pos``), then
    the rows of ``fresh`` (the run's new rows of the bucket, as Spark wrote them), copied into one
    new Parquet file under ``folder`` through ``table``'s file IO (local disk or S3).

    ``tasks``: the bucket's data files, with the position delete files that apply to them (their rows
    are left out too); ``schema``: the table's Arrow schema (every stored column). Returns the new
    file's location, or None when no row is left (the bucket is then empty in this table).
    """
    older = sorted({path for task in tasks for path, _ in task.deletes})
    named = [replaced] if replaced is not None else []
    if older:
        named.append(read_position_deletes(table, older).select(["file_path", "pos"]))
    # Matched by the path without its scheme: a delete of a live row must never be lost to two
    # spellings of one file (the rewrite drops the delete files it folds).
    by_key = {path_key(task.path): task.path for task in tasks}
    dropped: dict[str, list[np.ndarray]] = {task.path: [] for task in tasks}
    for part in named:
        for name, positions in positions_by_file(part).items():
            target = by_key.get(path_key(name))
            if target is not None:
                dropped[target].append(positions)
    none = np.empty(0, dtype=np.int64)
    sources = [(task.path, np.concatenate([none, *dropped[task.path]])) for task in tasks if task.rows > 0]
    sources += [(path, none) for path in fresh]
    return copy_rows(table, sources, schema, join(folder, f"part-rewrite-{uuid.uuid4().hex}.parquet"))


def copy_rows(
    table: Any, sources: Sequence[tuple[str, np.ndarray]], schema: pa.Schema, location: str
) -> str | None:
    """The rows of each source file but those at its positions, in order, into one Parquet file at
    ``location``, a record batch at a time; None (and no file) if no row is left."""
    writer: pq.ParquetWriter | None = None
    stream: Any = None
    try:
        for path, dropped in sources:
            try:
                with table.io.new_input(path).open() as source:
                    reader = pq.ParquetFile(source)
                    keep = kept_positions(reader.metadata.num_rows, dropped)
                    start = 0
                    for batch in reader.iter_batches(batch_size=_BATCH_ROWS, columns=schema.names):
                        mask = keep[start : start + batch.num_rows]
                        start += batch.num_rows
                        if not mask.any():
                            continue
                        rows = pa.Table.from_batches([batch]).cast(schema).filter(pa.array(mask))
                        if writer is None:
                            stream = table.io.new_output(location).create(overwrite=True)
                            writer = pq.ParquetWriter(stream, schema, compression="snappy")
                        writer.write_table(rows)
            except (OSError, ValueError, pa.ArrowException) as exc:
                raise SnapshotStoreError(
                    f"cannot copy the rows of the snapshot's data file {path}: {exc}"
                ) from exc
    finally:
        if writer is not None:
            writer.close()
        if stream is not None:
            stream.close()
    return location if writer is not None else None

"""Rewriting a bucket (copy-on-write) on the driver with PyArrow, when its rows are few.

A bucket that reached its limits (:mod:`pipeline.layout`) is written again without its deleted
rows: the rows its older position deletes name, and the rows this run replaces. Done by Spark, its
rows make a round trip no patch needs: read with the whole item, shuffled to the bucket's task,
written again. For one bucket of a million-item table (62 500 rows) that cost 1.2 to 2.5 s here,
where the rest of the run took about 4; PyArrow reads, filters and writes the same rows on the
driver in a fraction of that (bench/pipeline_table.py), with no job and no shuffle.

The kept rows and the bucket's new rows (from the file Spark wrote for them, which the caller then
drops) are written as one file per bucket and table, sorted by key like every file of the tables
(:mod:`pipeline.ranges`): memory holds one bucket's rows. A run whose rewritten buckets hold more
than :data:`DRIVER_REWRITE_ROWS` rows leaves the rewrite to Spark, whose executors share it
(:func:`pipeline.incremental_run.merge_incremental`). Maintenance compacts a bucket the same way
(:mod:`pipeline.maintenance`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.deletes import read_position_deletes
from pipeline.errors import SnapshotStoreError
from pipeline.reading import path_key
from pipeline.storage import join
from pipeline.stored import FileTask

DRIVER_REWRITE_ROWS = 2_000_000  # above this many rows in the rewritten buckets, Spark rewrites
_BATCH_ROWS = 65_536
THREADS = 4  # buckets rewritten at once (storage waits as much as the CPU works)
RowFilter = Callable[[pa.Table], pa.Array]  # rows → a boolean mask of those to keep


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
    keys: Sequence[str],
    keep: RowFilter | None = None,
) -> str | None:
    """One bucket's live rows, less the rows ``replaced`` (``file_path``, ``pos``: those a run
    replaces), plus the rows of ``fresh`` (the run's new rows of the bucket, as Spark wrote them),
    sorted by ``keys`` into one new Parquet file under ``folder`` through ``table``'s file IO
    (local disk or S3).

    ``tasks``: the bucket's data files, with the position delete files that apply to them (their rows
    are left out too); ``schema``: the table's Arrow schema (every stored column); ``keep``: a
    further filter of the rows (maintenance drops old tombstones with it). Returns the new file's
    location, or None when no row is left (the bucket is then empty in this table).
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
    location = join(folder, f"part-rewrite-{uuid.uuid4().hex}.parquet")
    return copy_sorted(table, sources, schema, location, keys=keys, keep=keep)


def read_kept(
    table: Any, sources: Sequence[tuple[str, np.ndarray]], schema: pa.Schema, keep: RowFilter | None = None
) -> pa.Table:
    """The rows of each source file but those at its positions (and those ``keep`` rejects)."""
    parts = [schema.empty_table()]
    for path, dropped in sources:
        try:
            with table.io.new_input(path).open() as source:
                reader = pq.ParquetFile(source)
                kept = kept_positions(reader.metadata.num_rows, dropped)
                start = 0
                for batch in reader.iter_batches(batch_size=_BATCH_ROWS, columns=schema.names):
                    mask = kept[start : start + batch.num_rows]
                    start += batch.num_rows
                    if not mask.any():
                        continue
                    rows = pa.Table.from_batches([batch]).cast(schema).filter(pa.array(mask))
                    parts.append(rows if keep is None else rows.filter(keep(rows)))
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise SnapshotStoreError(
                f"cannot copy the rows of the snapshot's data file {path}: {exc}"
            ) from exc
    return pa.concat_tables(parts)


def copy_sorted(
    table: Any,
    sources: Sequence[tuple[str, np.ndarray]],
    schema: pa.Schema,
    location: str,
    *,
    keys: Sequence[str],
    keep: RowFilter | None = None,
) -> str | None:
    """:func:`read_kept`'s rows, sorted by ``keys``, into one Parquet file at ``location`` (row
    groups of :data:`_BATCH_ROWS`); None (and no file) if no row is left."""
    rows = read_kept(table, sources, schema, keep)
    if rows.num_rows == 0:
        return None
    ordered = rows.sort_by([(name, "ascending") for name in keys])
    try:
        with table.io.new_output(location).create(overwrite=True) as stream:
            pq.write_table(
                ordered,
                stream,
                compression="snappy",
                row_group_size=_BATCH_ROWS,
                use_dictionary=dictionary_columns(ordered),
            )
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise SnapshotStoreError(f"cannot write the snapshot's data file {location}: {exc}") from exc
    return location


def dictionary_columns(rows: pa.Table) -> list[str]:
    """The leaf columns (Parquet paths) worth a dictionary: at most half their values distinct.

    A dictionary of unique values (keys, sequence numbers, timestamps) adds a page to write and a
    lookup per value to read, and makes the file larger; Spark's writer falls back to plain
    encoding for such columns, so a table compacted here with pyarrow's default (a dictionary for
    every column) read 15 % slower than the same rows rebuilt by Spark."""
    chosen: list[str] = []
    for name, column in zip(rows.column_names, rows.columns, strict=True):
        for path, values in _leaves(name, column.combine_chunks()):
            present = len(values) - values.null_count
            if present and pc.count_distinct(values).as_py() * 2 <= present:
                chosen.append(path)
    return chosen


def _leaves(path: str, values: pa.Array) -> Iterator[tuple[str, pa.Array]]:
    """Each leaf of ``values`` with its Parquet column path (maps: ``key_value.key`` and
    ``key_value.value``; lists: ``list.element``)."""
    kind = values.type
    if pa.types.is_struct(kind):
        for index in range(kind.num_fields):
            yield from _leaves(f"{path}.{kind.field(index).name}", values.field(index))
    elif pa.types.is_map(kind):
        yield from _leaves(f"{path}.key_value.key", values.keys)
        yield from _leaves(f"{path}.key_value.value", values.items)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        yield from _leaves(f"{path}.list.element", values.flatten())
    else:
        yield path, values

"""One Iceberg snapshot of one snapshot table: files out, files in, position deletes applied, old
snapshots expired — what every run, bootstrap and maintenance pass commits through — and a
run's commit of both tables (:func:`commit_run`).

PyIceberg registers the Parquet files Spark or the driver wrote (``parquet_file_to_data_file``
reads each footer's statistics: the key columns' bounds are what lets readers skip files) and
:class:`pipeline.deletes.RowDelta` writes the manifests, since PyIceberg has no public way to
commit position deletes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from pipeline.errors import ConcurrentRunError, HalfCommittedError, SnapshotStoreError
from pipeline.ranges import RANGES, KeyRanges
from pipeline.stored import FileTask

RUN = "consumer.run"  # runs committed: the snapshot's version number
WATERMARKS = "consumer.watermarks"
LISTED_AT = "consumer.listed_at"
RUN_AGAIN = "this run wrote nothing: run it again to merge on top of the other"

TasksOf = Callable[[list[int] | None], list[FileTask]]  # a table's live files: all, or some buckets'


class RunTables(Protocol):
    """What a run's commit uses of the snapshot tables: :class:`pipeline.table.SnapshotTables`, which
    commits through this module (so this module names the tables by what it asks of them)."""

    items_name: str
    tombstones_name: str
    snapshots_kept: int

    def load(self, name: str) -> Any | None: ...

    def tasks(self, name: str, buckets: Iterable[int] | None = None) -> list[FileTask]: ...

    def check_unmoved(self, read_at: Mapping[str, int | None], what: str) -> tuple[Any, Any]: ...


def replace(
    table: Any,
    tasks_of: TasksOf,
    buckets: Iterable[int] | None,
    files: Sequence[str],
    *,
    deletes: Mapping[int, pa.Table],
    deletes_folder: str,
    properties: Mapping[str, str],
    snapshots_kept: int,
    table_properties: Mapping[str, str] | None = None,
    merge_manifests_at: int | None = None,
) -> None:
    """One Iceberg snapshot of ``table``: every file of ``buckets`` (None: of every bucket) out,
    ``files`` in, ``deletes`` (bucket → :data:`pipeline.deletes.POSITION_DELETE_ARROW` rows) applied
    through one position delete file per bucket, written under ``deletes_folder``; snapshots beyond
    ``snapshots_kept`` expired; ``table_properties`` set, all in one commit. ``merge_manifests_at``:
    see :class:`pipeline.deletes.RowDelta`."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file
    from pyiceberg.table import TableProperties
    from pyiceberg.utils.concurrent import ExecutorFactory

    from pipeline.deletes import (
        MERGE_MANIFESTS_AT,
        POSITION_DELETE_ARROW,
        RowDelta,
        read_position_deletes,
        write_position_deletes,
    )

    wanted = None if buckets is None else sorted(set(buckets))
    removed: list[str] = []
    if wanted is None or wanted:
        for task in tasks_of(wanted):
            removed.append(task.path)
            removed.extend(path for path, _ in task.deletes)
    metadata = table.metadata
    added = list(
        ExecutorFactory.get_or_create().map(lambda f: parquet_file_to_data_file(table.io, metadata, f), files)
    )
    # A patched bucket keeps one delete file per table: its older ones are folded into the new one
    # and leave in the same commit (readers open every delete file of a bucket).
    older: dict[int, set[str]] = {}
    for task in tasks_of(sorted(deletes)) if deletes else []:
        older.setdefault(task.bucket, set()).update(path for path, _ in task.deletes)
    delete_files = []
    for bucket, positions in sorted(deletes.items()):
        folded = sorted(older.get(bucket, ()))
        merged = pa.concat_tables(
            [positions.cast(POSITION_DELETE_ARROW), read_position_deletes(table, folded)]
        )
        written = write_position_deletes(table, deletes_folder, bucket, merged)
        if written is not None:
            delete_files.append(written)
            removed.extend(folded)
    with table.transaction() as tx:
        if metadata.name_mapping() is None:  # data files written by Spark carry no field ids
            tx.set_properties(
                **{TableProperties.DEFAULT_NAME_MAPPING: metadata.schema().name_mapping.model_dump_json()}
            )
        if removed or added or delete_files:
            with RowDelta(
                tx,
                removed=set(removed),
                added=added,
                deletes=delete_files,
                properties=dict(properties),
                merge_manifests_at=MERGE_MANIFESTS_AT if merge_manifests_at is None else merge_manifests_at,
            ):
                pass
        expire(tx, snapshots_kept)
        if table_properties:
            tx.set_properties(**dict(table_properties))


def expire(tx: Any, kept: int) -> None:
    """Keep the newest ``kept`` snapshots of the table's history (time travel reaches back that
    many commits): every commit copies and rewrites the table's metadata whole, so, kept forever,
    each commit would cost more than the last. Only the current snapshot's ancestors are expired,
    never the head of a branch or a tag someone made. The files that only expired snapshots name
    are left for :func:`pipeline.maintenance.remove_orphans`, which deletes them once no run that
    began before can still be committing."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    metadata = tx.table_metadata
    history: list[int] = []
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        history.append(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else metadata.snapshot_by_id(parent)
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    old = [snapshot_id for snapshot_id in history[kept:] if snapshot_id not in protected]
    if old:
        ExpireSnapshots(tx).by_ids(old).commit()


@dataclass(frozen=True)
class RunFiles:
    """A run's new data files per table, and the buckets whose old files they replace (None: all)."""

    items: Sequence[str]
    tombstones: Sequence[str]
    item_buckets: Iterable[int] | None
    tombstone_buckets: Iterable[int] | None


def commit_run(
    tables: RunTables,
    files: RunFiles,
    *,
    watermarks: Mapping[str, str],
    summary: Mapping[str, str],
    item_deletes: Mapping[int, pa.Table] | None = None,
    tombstone_deletes: Mapping[int, pa.Table] | None = None,
    deletes_folder: str = "",
    read_at: Mapping[str, int | None] | None = None,
    planned: Mapping[str, Sequence[FileTask]] | None = None,
    ranges: KeyRanges | None = None,
    listed_at: float | None = None,
) -> str:
    """One run: in each table, every file of its buckets (None: of every bucket) is replaced by the
    new files, and the rows named in ``*_deletes`` (bucket → a table of data file path and row
    position, :data:`pipeline.deletes.POSITION_DELETE_ARROW`) are deleted through position delete
    files written under ``deletes_folder``.

    Tombstones first, then the snapshot table with its properties: a failure in between leaves the
    snapshot table — and its watermarks — as they were, and the next run recomputes those buckets
    from the same changes (the merge is a max per key, and it deletes every older row of a key it
    finds, so applying a change twice is harmless). Returns the snapshot's new version
    (``consumer.run``, six digits).

    ``read_at`` (:meth:`~pipeline.table.SnapshotTables.snapshot_ids` when the run began): if either
    table has moved since, another run (or a maintenance pass) committed in between and this run's
    plan (which buckets to replace, which rows to delete) is stale, so nothing is written
    (:class:`ConcurrentRunError`). From here on each table's commit requires the snapshot loaded
    here to still be current (Iceberg's optimistic concurrency), so no other writer can slip in
    unnoticed. ``planned`` (per table name, the files of the buckets the run touched, as it planned
    them at ``read_at``) then spares planning the tables again. ``ranges`` and ``listed_at`` are
    recorded with the watermarks.
    """
    from pyiceberg.exceptions import CommitFailedException

    properties = {k: str(v) for k, v in summary.items()}
    if read_at is not None:
        tombstones, items = tables.check_unmoved(read_at, "run")
    else:
        tombstones, items = tables.load(tables.tombstones_name), tables.load(tables.items_name)
        if tombstones is None or items is None:
            raise SnapshotStoreError(
                f"table {tables.tombstones_name} or {tables.items_name} vanished during the run"
            )
    try:
        replace(
            tombstones,
            _tasks_of(tables, tables.tombstones_name, planned),
            files.tombstone_buckets,
            files.tombstones,
            deletes=tombstone_deletes or {},
            deletes_folder=deletes_folder,
            properties=properties,
            snapshots_kept=tables.snapshots_kept,
        )
    except CommitFailedException as exc:
        raise ConcurrentRunError(
            f"{tables.tombstones_name} changed while this run was committing (another writer "
            f"committed first: {exc}); {RUN_AGAIN}"
        ) from exc
    run = int(items.properties.get(RUN, 0)) + 1
    bookkeeping = {RUN: str(run), WATERMARKS: json.dumps(dict(sorted(watermarks.items())), sort_keys=True)}
    if ranges is not None:
        bookkeeping[RANGES] = ranges.to_json()
    if listed_at is not None:
        bookkeeping[LISTED_AT] = repr(float(listed_at))
    try:
        replace(
            items,
            _tasks_of(tables, tables.items_name, planned),
            files.item_buckets,
            files.items,
            deletes=item_deletes or {},
            deletes_folder=deletes_folder,
            properties=properties,
            snapshots_kept=tables.snapshots_kept,
            table_properties=bookkeeping,
        )
    except Exception as exc:
        raise HalfCommittedError(
            f"{tables.tombstones_name} committed this run but {tables.items_name} did not ({exc}); "
            f"run the snapshot again: it merges the same changes and repairs {tables.items_name}"
        ) from exc
    return f"{run:06d}"


def _tasks_of(tables: RunTables, name: str, planned: Mapping[str, Sequence[FileTask]] | None) -> TasksOf:
    """A table's live files by bucket: from ``planned`` when the run planned those buckets (the
    table cannot have moved since, :meth:`~pipeline.table.SnapshotTables.check_unmoved`), else from
    the table."""

    def tasks_of(buckets: list[int] | None) -> list[FileTask]:
        if planned is None or buckets is None:
            return tables.tasks(name, buckets)
        chosen = set(buckets)
        return [task for task in planned[name] if task.bucket in chosen]

    return tasks_of

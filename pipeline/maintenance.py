"""Keeping the snapshot tables as good to read after a thousand runs as after one, on a policy.

Runs patch buckets (a small data file and a position delete file per run: :mod:`pipeline.layout`)
and rewrite them only at their limits, old snapshots leave the metadata but not the storage, and
tombstones pile up. A maintenance pass (:func:`maintain`) puts that right, in three steps:

* **Compaction**: every bucket of the items and tombstones tables that holds more than one data
  file, or any delete file, is rewritten as one file sorted by key, its deleted rows left out
  (:func:`pipeline.rewrite.copy_sorted`), exactly like a fresh rebuild lays it out.
* **Tombstone expiry**: a tombstone exists so that a change older than the REMOVE, landing late,
  cannot bring the item back. DynamoDB Streams keeps a change 24 hours, so a change landed after
  the last run listed the change log (``consumer.listed_at``) was created less than 24 hours before
  it; a tombstone older than that, by ``tombstone_retention_hours`` (25: the stream's retention and
  an hour for clocks), can no longer be overtaken and is dropped while its bucket is compacted.
* **Orphan removal** (:func:`remove_orphans`): files in the tables' folders that no snapshot
  still kept names (buckets rewritten or compacted, snapshots expired by
  :func:`pipeline.commit.expire`, runs that failed) are deleted once older than
  ``orphan_min_age_hours``: a run still writing its files, not committed yet, must never lose them,
  so the age must exceed the longest run.

Safe beside ``follow``: a compaction is planned on the tables' snapshots and committed only if
neither table has moved since (the same check a run makes, :meth:`SnapshotTables.check_unmoved`,
and Iceberg's own on the commit), so a pass that loses the race to a run commits nothing and the
next pass starts again; a run that loses it to a pass fails the same way and runs again
(:mod:`pipeline.follow`). Neither changes what the table holds, so the loser loses only time.
"""

from __future__ import annotations

import datetime as dt
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from pipeline import commit as committing
from pipeline import rewrite
from pipeline.deletes import read_position_deletes
from pipeline.errors import ConcurrentRunError, SnapshotStoreError
from pipeline.log_lines import Progress, quiet
from pipeline.reading import path_key
from pipeline.schemas import CREATED
from pipeline.storage import is_local, join, local_path
from pipeline.stored import FileTask, arrow_schema, stored_schema
from pipeline.table import SnapshotTables, as_file_uri, table_tasks

STREAM_RETENTION_HOURS = 24  # DynamoDB Streams keeps a change this long


@dataclass(frozen=True)
class Policy:
    """When a maintenance pass compacts, expires and removes (``pipeline.*`` settings)."""

    tombstone_retention_hours: float = STREAM_RETENTION_HOURS + 1
    orphan_min_age_hours: float = 24.0
    compact_max_rows: int = rewrite.DRIVER_REWRITE_ROWS  # larger buckets are left to a full rebuild

    @classmethod
    def of(cls, pipeline: Any) -> Policy:
        return cls(pipeline.tombstone_retention_hours, pipeline.orphan_min_age_hours)


@dataclass(frozen=True)
class MaintenanceResult:
    compacted: dict[str, int] = field(default_factory=dict)  # table name → buckets compacted
    tombstones_dropped: int = 0
    orphans_removed: int = 0
    too_large: tuple[str, ...] = ()  # buckets left as they were (over compact_max_rows), named

    def line(self) -> str:
        done = ", ".join(f"{name}: {count} bucket(s) compacted" for name, count in self.compacted.items())
        return (
            f"maintenance: {done or 'nothing to compact'}; {self.tombstones_dropped} tombstone(s) "
            f"expired; {self.orphans_removed} orphan file(s) removed"
            + (f"; left as they are (too large): {', '.join(self.too_large)}" if self.too_large else "")
        )


def needs_compaction(tasks: Sequence[FileTask]) -> list[int]:
    """The buckets that are not one data file without deletes: what a fresh rebuild would write."""
    files: dict[int, int] = {}
    deleted: set[int] = set()
    for task in tasks:
        files[task.bucket] = files.get(task.bucket, 0) + 1
        if task.deletes:
            deleted.add(task.bucket)
    return sorted(bucket for bucket, count in files.items() if count > 1 or bucket in deleted)


def expiry_horizon(listed_at: float | None, policy: Policy) -> float | None:
    """Tombstones created before this (epoch s) can no longer be overtaken; None: keep them all
    (no run has listed the change log yet)."""
    return None if listed_at is None else listed_at - policy.tombstone_retention_hours * 3600


def _old_tombstone_buckets(table: Any, horizon: float) -> list[int]:
    """Buckets with a tombstone created before ``horizon``: the lower bound the data files record for
    the creation time says so without reading them."""
    field_id = table.schema().find_field(CREATED).field_id
    found: set[int] = set()
    for task in table.scan().plan_files():
        bound = (task.file.lower_bounds or {}).get(field_id)
        if bound is not None and struct.unpack("<d", bound)[0] < horizon:
            found.add(int(task.file.partition[0]))
    return sorted(found)


def _not_expired(horizon: float) -> Callable[[pa.Table], pa.Array]:
    def keep(rows: pa.Table) -> pa.Array:
        created = rows.column(CREATED)
        return pc.or_kleene(pc.is_null(created), pc.greater_equal(created, horizon))

    return keep


def maintain(
    tables: SnapshotTables, policy: Policy, *, now: float | None = None, progress: Progress = quiet
) -> MaintenanceResult:
    """One maintenance pass (the module's docstring says what it does); :class:`ConcurrentRunError`
    when a run committed while it compacted (nothing of the pass is committed then, and the orphans
    are left for the next pass)."""
    now = time.time() if now is None else now
    read_at = tables.snapshot_ids()
    state = tables.state()
    if state is None:
        return MaintenanceResult()
    horizon = expiry_horizon(state.listed_at, policy)
    schema = arrow_schema(stored_schema(tables.keys))
    out = tables.data_uri(f"maintenance-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
    plans: dict[str, tuple[Any, list[FileTask], list[int]]] = {}
    too_large: list[str] = []
    for name in (tables.tombstones_name, tables.items_name):
        table = tables.load(name)
        if table is None or table.current_snapshot() is None:
            continue
        tasks = table_tasks(table)
        chosen = set(needs_compaction(tasks))
        if name == tables.tombstones_name and horizon is not None:
            chosen.update(_old_tombstone_buckets(table, horizon))
        rows = {b: sum(t.rows for t in tasks if t.bucket == b) for b in chosen}
        too_large += [
            f"{name} bucket {b} ({rows[b]} rows)" for b in sorted(chosen) if rows[b] > policy.compact_max_rows
        ]
        chosen = {b for b in chosen if rows[b] <= policy.compact_max_rows}
        if chosen:
            plans[name] = (table, [t for t in tasks if t.bucket in chosen], sorted(chosen))
    compacted: dict[str, int] = {}
    dropped = 0
    if plans:
        written: dict[str, list[str]] = {}
        for name, (table, tasks, buckets) in plans.items():
            keep = _not_expired(horizon) if name == tables.tombstones_name and horizon is not None else None
            written[name] = _compact(
                table,
                tasks,
                buckets,
                schema=schema,
                keys=tables.keys.names,
                keep=keep,
                folder=join(out, name),
            )
        try:
            tombstones, items = tables.check_unmoved(read_at, "maintenance pass")
            loaded = {tables.tombstones_name: tombstones, tables.items_name: items}
            for name, (_, tasks, buckets) in plans.items():
                before = sum(t.rows - sum(n for _, n in t.deletes) for t in tasks)
                after = sum(_rows(loaded[name], path) for path in written[name])
                _commit(
                    loaded[name],
                    tasks,
                    buckets,
                    written[name],
                    kept=tables.snapshots_kept,
                    gone=before - after,
                )
                compacted[name] = len(buckets)
                if name == tables.tombstones_name:
                    dropped = max(0, before - after)
        except ConcurrentRunError:
            for name, (table, _, _) in plans.items():  # files no commit names can go at once
                if name not in compacted:
                    for path in written[name]:
                        table.io.delete(path)
            raise
        progress(f"[maintain] compacted {', '.join(f'{n} {c} bucket(s)' for n, c in compacted.items())}")
    orphans = remove_orphans(tables, min_age_seconds=policy.orphan_min_age_hours * 3600, now=now)
    result = MaintenanceResult(compacted, dropped, orphans, tuple(too_large))
    progress(f"[maintain] {result.line()}")
    return result


def _compact(
    table: Any,
    tasks: list[FileTask],
    buckets: list[int],
    *,
    schema: pa.Schema,
    keys: Sequence[str],
    keep: Callable[[pa.Table], pa.Array] | None,
    folder: str,
) -> list[str]:
    """Each bucket's live rows (and those ``keep`` keeps), sorted by key, as one new file."""

    def one(bucket: int) -> str | None:
        mine = [t for t in tasks if t.bucket == bucket]
        older = sorted({path for t in mine for path, _ in t.deletes})
        dropped: dict[str, list[np.ndarray]] = {t.path: [] for t in mine}
        if older:
            by_key = {path_key(t.path): t.path for t in mine}
            named = rewrite.positions_by_file(read_position_deletes(table, older))
            for path, positions in named.items():
                target = by_key.get(path_key(path))
                if target is not None:
                    dropped[target].append(positions)
        none = np.empty(0, dtype=np.int64)
        sources = [(t.path, np.concatenate([none, *dropped[t.path]])) for t in mine if t.rows > 0]
        location = as_file_uri(join(folder, f"b={bucket}", f"part-compact-{uuid.uuid4().hex}.parquet"))
        return rewrite.copy_sorted(table, sources, schema, location, keys=keys, keep=keep)

    with ThreadPoolExecutor(max_workers=rewrite.THREADS) as pool:
        return [location for location in pool.map(one, buckets) if location is not None]


def _rows(table: Any, path: str) -> int:
    import pyarrow.parquet as pq

    with table.io.new_input(path).open() as stream:
        return int(pq.ParquetFile(stream).metadata.num_rows)


def _commit(
    table: Any, tasks: list[FileTask], buckets: list[int], files: list[str], *, kept: int, gone: int
) -> None:
    from pyiceberg.exceptions import CommitFailedException

    try:
        committing.replace(
            table,
            lambda wanted: [t for t in tasks if wanted is None or t.bucket in set(wanted)],
            buckets,
            files,
            deletes={},
            deletes_folder="",
            properties={"consumer.operation": "maintenance", "consumer.rows-dropped": str(gone)},
            snapshots_kept=kept,
            merge_manifests_at=1,  # a scan then reads one manifest per content, as a fresh table's
        )
    except CommitFailedException as exc:
        raise ConcurrentRunError(
            f"{'.'.join(table.name())} changed while a maintenance pass was committing ({exc}); "
            "the pass wrote nothing to it: run it again"
        ) from exc


def referenced_files(tables: SnapshotTables) -> set[str]:
    """Every file some kept snapshot of the three tables still needs, as :func:`path_key` spells
    it: metadata files (current and logged), manifest lists, manifests, data and delete files."""
    found: set[str] = set()
    for name in tables.names:
        table = tables.load(name)
        if table is None:
            continue
        metadata = table.metadata
        found.add(path_key(table.metadata_location))
        found.update(path_key(entry.metadata_file) for entry in metadata.metadata_log)
        for snapshot in metadata.snapshots:
            found.add(path_key(snapshot.manifest_list))
            for manifest in snapshot.manifests(table.io):
                found.add(path_key(manifest.manifest_path))
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    found.add(path_key(entry.data_file.file_path))
    return found


def _listing(uri: str) -> list[tuple[str, float]]:
    """Every file under ``uri`` with its modification time (epoch s); none if it does not exist."""
    if is_local(uri):
        filesystem: pafs.FileSystem = pafs.LocalFileSystem()
        root = str(local_path(uri).resolve())
    else:
        filesystem, root = pafs.FileSystem.from_uri(uri)
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except (OSError, ValueError) as exc:
        raise SnapshotStoreError(f"cannot list {uri} for orphan files: {exc}") from exc
    scheme = "" if is_local(uri) else uri.split("://", 1)[0] + "://"
    return [
        (scheme + info.path, info.mtime.timestamp() if info.mtime is not None else 0.0)
        for info in infos
        if info.type == pafs.FileType.File
    ]


def remove_orphans(tables: SnapshotTables, *, min_age_seconds: float, now: float) -> int:
    """Delete the files under the tables' folders that no kept snapshot names and that are older
    than ``min_age_seconds``; returns how many.

    Listed first, then the tables' metadata read: a file committed in between is in the metadata
    read, and one written after the listing is not a candidate at all."""
    folders = [tables.runs_uri, *(tables.location(name) for name in tables.names)]
    listed = [found for folder in folders for found in _listing(folder)]
    keep = referenced_files(tables)
    doomed = [path for path, mtime in listed if now - mtime >= min_age_seconds and path_key(path) not in keep]
    if not doomed:
        return 0
    io = next((t.io for t in (tables.load(n) for n in tables.names) if t is not None), None)
    if io is None:
        return 0
    for path in doomed:
        io.delete(as_file_uri(path))
    return len(doomed)

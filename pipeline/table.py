"""The snapshot as Apache Iceberg tables in a catalog (:mod:`pipeline.catalog`), through PyIceberg
(no Spark runtime jar).

Three tables per environment, in the namespace :func:`pipeline.catalog.namespace_for`:

* ``<table>_snapshot`` — one row per item that exists: what readers query (Athena, Trino, Spark,
  DuckDB, PyIceberg: any Iceberg reader, by name through the catalog);
* ``<table>_tombstones`` — keys whose latest change is a REMOVE (kept so that a change arriving late
  with a lower sequence number can never resurrect a removed item, until
  :mod:`pipeline.maintenance` finds that none can arrive any more);
* ``<table>_base`` — after a bootstrap, the table's state at the export's (or scan's) time.

All are partitioned by ``identity(_bucket)``, the key's range (:mod:`pipeline.ranges`), and their
files are sorted by key (the tables' Iceberg sort order says so), with exact bounds recorded for
the key columns: a point lookup plans one bucket's files. A run touches only the buckets that hold a
changed key, in one Iceberg commit per table, and either rewrites a bucket (its old files out, a new
one in) or patches it (a new data file, and a position delete file naming the rows it replaces:
:mod:`pipeline.deletes`, :mod:`pipeline.layout`). Never an equality delete: PyIceberg, one of the
readers, cannot read them.

The data files are written by Spark (a run's new rows, a full rebuild) or by the driver with
PyArrow (a rewritten or compacted bucket: :mod:`pipeline.rewrite`); this module registers them
(:mod:`pipeline.commit`) and keeps the runs' bookkeeping in the snapshot table's properties, set in
the same commit as its data:

* ``consumer.watermarks`` — per shard, the highest sequence number merged (JSON);
* ``consumer.start_time`` — after a bootstrap, the export's (or scan's) start time, epoch seconds:
  changes created before it are already in the bootstrapped state and never win over it;
* ``consumer.buckets`` — the most buckets the tables may have, fixed when they are created;
* ``consumer.ranges`` — the key bounds of the buckets (:mod:`pipeline.ranges`);
* ``consumer.listed_at`` — when the last run listed the change log (epoch seconds): every change
  landed before it is merged, which dates what may still arrive late.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline import commit as committing
from pipeline.catalog import open_catalog, sql_name
from pipeline.commit import LISTED_AT, RUN, RUN_AGAIN, WATERMARKS
from pipeline.errors import ConcurrentRunError, SnapshotStoreError
from pipeline.ranges import RANGES, KeyRanges
from pipeline.schemas import KeySchema
from pipeline.storage import is_local, join
from pipeline.stored import BUCKET, FileTask, arrow_schema, schema_difference, stored_schema

DEFAULT_BUCKETS = 16
START_TIME = "consumer.start_time"
BUCKETS = "consumer.buckets"
DEFAULT_SNAPSHOTS_KEPT = 20


@dataclass(frozen=True)
class TableState:
    """What the snapshot table says about the last run."""

    watermarks: dict[str, str]
    start_time: float | None
    buckets: int
    run: int  # runs committed so far (0: created, never committed)
    ranges: KeyRanges | None = None  # None: no run has merged a key yet (or an older layout)
    listed_at: float | None = None

    @property
    def version(self) -> str:
        return f"{self.run:06d}"


class SnapshotTables:
    """The snapshot's Iceberg tables: create, read their files and properties, commit a run."""

    def __init__(
        self,
        snapshot_uri: str,
        namespace: str,
        table_name: str,
        keys: KeySchema,
        *,
        region: str | None = None,
        glue_endpoint: str | None = None,
        catalog: Any = None,
        snapshots_kept: int = DEFAULT_SNAPSHOTS_KEPT,
    ) -> None:
        self.snapshots_kept = snapshots_kept
        self.snapshot_uri = snapshot_uri.rstrip("/")
        self.namespace = namespace
        self.items_name = f"{namespace}.{sql_name(table_name)}_snapshot"
        self.tombstones_name = f"{namespace}.{sql_name(table_name)}_tombstones"
        self.base_name = f"{namespace}.{sql_name(table_name)}_base"
        # The runs' data files, beside the tables' own folders: everything of this environment's
        # tables lives under these four folders, and nothing else does (pipeline/maintenance.py).
        self.runs_uri = join(self.snapshot_uri, "warehouse", namespace, f"{sql_name(table_name)}_runs")
        self.keys = keys
        self.catalog = catalog if catalog is not None else open_catalog(snapshot_uri, region, glue_endpoint)

    # ------------------------------------------------------------------------------- reading

    def load(self, name: str) -> Any | None:
        """One of the tables as PyIceberg loads it, or None if it does not exist."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(name)
        except NoSuchTableError:
            return None

    def items_table(self) -> Any | None:
        return self.load(self.items_name)

    def state(self) -> TableState | None:
        """The last run's bookkeeping, or None before the first run (or bootstrap)."""
        table = self.items_table()
        if table is None:
            return None
        props = table.properties
        try:
            marks = {str(k): str(v) for k, v in json.loads(props.get(WATERMARKS, "{}")).items()}
            start = props.get(START_TIME)
            listed = props.get(LISTED_AT)
            ranges = props.get(RANGES)
            return TableState(
                marks,
                float(start) if start else None,
                int(props.get(BUCKETS, DEFAULT_BUCKETS)),
                int(props.get(RUN, 0)),
                KeyRanges.from_json(ranges, self.keys) if ranges else None,
                float(listed) if listed else None,
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise SnapshotStoreError(f"{self.items_name}: unreadable consumer.* properties: {exc}") from exc

    def snapshot_ids(self) -> dict[str, int | None]:
        """The current snapshot of the items and tombstones tables (None: no table or no snapshot
        yet): taken before a run reads them, and checked again by :meth:`commit`."""
        tables = {name: self.load(name) for name in (self.items_name, self.tombstones_name)}
        return {name: None if table is None else _snapshot_id(table) for name, table in tables.items()}

    def tasks(self, name: str, buckets: Iterable[int] | None = None) -> list[FileTask]:
        """The live data files of one table (all, or those of the given buckets), each with the
        position delete files that apply to it, in the table's current snapshot."""
        table = self.load(name)
        return [] if table is None else table_tasks(table, buckets)

    def data_files(self, name: str, buckets: Iterable[int] | None = None) -> list[str]:
        """The data files of one table (all, or those of the given buckets) in its current snapshot."""
        return [task.path for task in self.tasks(name, buckets)]

    def live_rows(self, name: str) -> int:
        """Rows a reader sees in one table: its records minus its position deletes (each of ours
        deletes one live row, and a rewritten bucket's delete files leave with its data files)."""
        table = self.load(name)
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is None or snapshot.summary is None:
            return 0
        totals = snapshot.summary.additional_properties
        return int(totals.get("total-records", 0)) - int(totals.get("total-position-deletes", 0))

    # ------------------------------------------------------------------------------- writing

    def _create(self, name: str, buckets: int) -> Any:
        schema = arrow_schema(stored_schema(self.keys))
        if self.namespace not in {".".join(n) for n in self.catalog.list_namespaces()}:
            self.catalog.create_namespace_if_not_exists(self.namespace)
        location = self.location(name)
        # Loaded first: creating writes a metadata file before the catalog refuses a second table,
        # and every run would leave one behind.
        table = self.load(name)
        if table is None:
            properties = {BUCKETS: str(buckets), **self._table_properties()}
            table = self.catalog.create_table_if_not_exists(
                name, schema=schema, location=location, properties=properties
            )
        else:
            self._check_schema(name, table, schema)
        if not table.spec().fields:
            with table.update_spec() as update:
                update.add_identity(BUCKET)
            table = self.catalog.load_table(name)
        if table.sort_order().is_unsorted:
            from pyiceberg.transforms import IdentityTransform

            with table.update_sort_order() as order:
                for key in self.keys.names:
                    order.asc(key, IdentityTransform())
            table = self.catalog.load_table(name)
        wanted = self._table_properties()
        if any(table.properties.get(key) != value for key, value in wanted.items()):
            with table.transaction() as tx:
                tx.set_properties(**wanted)
            table = self.catalog.load_table(name)
        return table

    def _check_schema(self, name: str, table: Any, wanted: pa.Schema) -> None:
        """An existing table must have the columns this run writes: a table made for other key
        attributes (``table.partition_key`` / ``sort_key`` changed since) or by a version that
        stored items differently would otherwise fail deep in a write or a commit, or match
        changes on the wrong columns."""
        difference = schema_difference(table.schema().as_arrow(), wanted)
        if difference is not None:
            keys = ", ".join(f"{a.name} ({a.type})" for a in self.keys.attributes)
            raise SnapshotStoreError(
                f"table {name} does not have the columns this run writes for the key attributes "
                f"{keys}: it {difference}. It was made for other key attributes or by another "
                "version. Put table.partition_key / table.sort_key back as they were, or point "
                "pipeline.snapshot_uri at a new location (bootstrap again there if this one was "
                "bootstrapped) and run the snapshot job with --full"
            )

    def _table_properties(self) -> dict[str, str]:
        """Iceberg properties every table of ours has (set again when a setting changes them).

        * No automatic retry of a commit that lost a race: PyIceberg would rebuild the commit on
          top of the other writer's snapshot, but the run's position deletes and replaced buckets
          were planned on the snapshot it read; it must stop and run again
          (:class:`ConcurrentRunError`) instead.
        * As many old metadata files as snapshots kept (:func:`pipeline.commit.expire`), the older
          ones deleted.
        * Exact lower and upper bounds for the key columns (Iceberg keeps 16 characters by
          default): two keys sharing their first 16 characters must still tell files apart.
        """
        from pyiceberg.table import TableProperties

        return {
            TableProperties.COMMIT_NUM_RETRIES: "0",
            TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: str(self.snapshots_kept),
            TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
            **{f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}.{key}": "full" for key in self.keys.names},
        }

    def ensure(self, buckets: int = DEFAULT_BUCKETS) -> int:
        """Create the tables if missing; returns the bucket count the snapshot table has."""
        items = self._create(self.items_name, buckets)
        count = int(items.properties.get(BUCKETS, buckets))
        self._create(self.tombstones_name, count)
        self._create(self.base_name, count)
        return count

    def commit_base(self, files: Sequence[str], start_time: float, ranges: KeyRanges | None) -> None:
        """A bootstrap: the base table holds ``files`` (the table's state at ``start_time``, laid
        out by ``ranges``), and the snapshot table's next run is a full one (base + every change
        from ``start_time`` on)."""
        base = self.load(self.base_name)
        items = self.load(self.items_name)
        if base is None or items is None:
            raise SnapshotStoreError(f"{self.base_name} or {self.items_name} vanished during the bootstrap")
        committing.replace(
            base,
            lambda buckets: self.tasks(self.base_name, buckets),
            None,
            files,
            deletes={},
            deletes_folder="",
            properties={},
            snapshots_kept=self.snapshots_kept,
        )
        with items.transaction() as tx:
            tx.set_properties(**{START_TIME: repr(float(start_time)), WATERMARKS: "{}", RUN: "0"})
            if ranges is not None:
                tx.set_properties(**{RANGES: ranges.to_json()})

    def data_uri(self, run_id: str) -> str:
        """Where a run (or a maintenance pass) writes its Parquet files before they are added to
        the tables."""
        return join(self.runs_uri, run_id)

    def location(self, name: str) -> str:
        """The folder of one table's metadata (its Iceberg location)."""
        return join(self.snapshot_uri, "warehouse", *name.split("."))

    @property
    def names(self) -> tuple[str, str, str]:
        return (self.items_name, self.tombstones_name, self.base_name)

    def check_unmoved(self, read_at: Mapping[str, int | None], what: str) -> tuple[Any, Any]:
        """The tombstones and items tables, loaded now; :class:`ConcurrentRunError` if either has
        a newer snapshot than ``read_at`` (:meth:`snapshot_ids` when ``what`` began planning)."""
        tombstones = self.load(self.tombstones_name)
        items = self.load(self.items_name)
        if tombstones is None or items is None:
            raise SnapshotStoreError(
                f"table {self.tombstones_name} or {self.items_name} vanished during the {what}"
            )
        moved = [
            name
            for name, table in ((self.items_name, items), (self.tombstones_name, tombstones))
            if _snapshot_id(table) != read_at.get(name)
        ]
        if moved:
            raise ConcurrentRunError(
                f"{', '.join(moved)} changed while this {what} was merging (another run or a "
                f"maintenance pass committed); {RUN_AGAIN}"
            )
        return tombstones, items

    def commit(
        self,
        *,
        item_files: Sequence[str],
        tombstone_files: Sequence[str],
        item_buckets: Iterable[int] | None,
        tombstone_buckets: Iterable[int] | None,
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
        """One run's commit, tombstones then items: :func:`pipeline.commit.commit_run`."""
        return committing.commit_run(
            self,
            committing.RunFiles(item_files, tombstone_files, item_buckets, tombstone_buckets),
            watermarks=watermarks,
            summary=summary,
            item_deletes=item_deletes,
            tombstone_deletes=tombstone_deletes,
            deletes_folder=deletes_folder,
            read_at=read_at,
            planned=planned,
            ranges=ranges,
            listed_at=listed_at,
        )


def table_tasks(table: Any, buckets: Iterable[int] | None = None) -> list[FileTask]:
    """The live data files of a loaded table (all, or those of the given buckets), each with the
    position delete files that apply to it, in its current snapshot."""
    if table.current_snapshot() is None:
        return []
    scan = table.scan()
    if buckets is not None:
        wanted = sorted(set(buckets))
        if not wanted:
            return []
        scan = table.scan(row_filter=f"{BUCKET} IN ({', '.join(str(b) for b in wanted)})")
    return sorted(
        FileTask(
            task.file.file_path,
            int(task.file.partition[0]),
            int(task.file.record_count),
            tuple(sorted((d.file_path, int(d.record_count)) for d in task.delete_files)),
        )
        for task in scan.plan_files()
    )


def _snapshot_id(table: Any) -> int | None:
    current = table.current_snapshot()
    return None if current is None else int(current.snapshot_id)


def as_file_uri(path: str) -> str:
    """A local path → file:// URI (what PyIceberg's file IO expects); other URIs unchanged."""
    if is_local(path) and not path.startswith("file:"):
        return f"file://{Path(path).resolve()}"  # not percent-encoded: PyIceberg opens the path as is
    return path

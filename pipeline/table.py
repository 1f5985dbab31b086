"""The snapshot as Apache Iceberg tables in a catalog, through PyIceberg (no Spark runtime jar).

Two tables per environment, in the namespace :func:`namespace_for`:

* ``<table>_snapshot`` — one row per item that exists: what readers query (Athena, Trino, Spark,
  DuckDB, PyIceberg: any Iceberg reader, by name through the catalog);
* ``<table>_tombstones`` — keys whose latest change is a REMOVE (kept so that a change arriving late
  with a lower sequence number can never resurrect a removed item).

Both are partitioned by ``identity(_bucket)``, ``_bucket = pmod(xxhash64(key attributes), buckets)``:
a run touches only the buckets that hold a changed key, in one Iceberg commit per table, and either
rewrites a bucket (its old files out, a new one in) or patches it (a new data file, and a position
delete file naming the rows it replaces: :mod:`pipeline.deletes`, :mod:`pipeline.layout`). Never an
equality delete: PyIceberg, one of the readers, cannot read them.

Spark writes the Parquet files (on the executors); this module only registers them (``add_files``,
using the Parquet footers' statistics) and keeps the run's bookkeeping in the snapshot table's
properties, set in the same commit as its data:

* ``consumer.watermarks`` — per shard, the highest sequence number merged (JSON);
* ``consumer.start_time`` — after a bootstrap, the export's (or scan's) start time, epoch seconds:
  changes created before it are already in the bootstrapped state and never win over it;
* ``consumer.buckets`` — the bucket count, fixed when the table is created.

Catalogs: a ``snapshot_uri`` on this machine gets a SQL catalog on SQLite
(``<snapshot_uri>/catalog.db``, warehouse ``<snapshot_uri>/warehouse``); an ``s3://`` one gets the
AWS Glue Data Catalog (warehouse ``<snapshot_uri>/warehouse``), which Athena, EMR and Trino read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline.errors import ConcurrentRunError, HalfCommittedError, SnapshotStoreError
from pipeline.schemas import KeySchema, snapshot_schema
from pipeline.storage import is_local, join, local_path

BUCKET = "_bucket"
DEFAULT_BUCKETS = 16
WATERMARKS = "consumer.watermarks"
START_TIME = "consumer.start_time"
BUCKETS = "consumer.buckets"
CATALOG = "consumer"  # the SQL catalog scopes its tables by catalog name: readers use this one
RUN = "consumer.run"  # runs committed: the snapshot's version number
DEFAULT_SNAPSHOTS_KEPT = 20
_NAME = re.compile(r"[^a-z0-9_]+")
_RUN_AGAIN = "this run wrote nothing: run it again to merge on top of the other"


def sql_name(text: str) -> str:
    """A catalog-safe name: lower case, runs of other characters → ``_`` (Glue's rules)."""
    return _NAME.sub("_", text.lower()).strip("_") or "default"


def namespace_for(application_name: str, env: str) -> str:
    return sql_name(f"{application_name}_{env}")


def stored_schema(keys: KeySchema) -> T.StructType:
    """The Spark schema of both tables' rows: a snapshot row plus its bucket."""
    return T.StructType(
        [*snapshot_schema(keys).fields, T.StructField(BUCKET, T.IntegerType(), nullable=False)]
    )


def arrow_type(kind: T.DataType) -> pa.DataType:
    """Spark type → Arrow type (the types the snapshot uses)."""
    if isinstance(kind, T.StringType):
        return pa.string()
    if isinstance(kind, T.BinaryType):
        return pa.binary()
    if isinstance(kind, T.DoubleType):
        return pa.float64()
    if isinstance(kind, T.IntegerType):
        return pa.int32()
    if isinstance(kind, T.LongType):
        return pa.int64()
    if isinstance(kind, T.BooleanType):
        return pa.bool_()
    if isinstance(kind, T.ArrayType):
        return pa.list_(arrow_type(kind.elementType))
    if isinstance(kind, T.MapType):
        return pa.map_(arrow_type(kind.keyType), arrow_type(kind.valueType))
    if isinstance(kind, T.StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType), nullable=True) for f in kind.fields])
    raise SnapshotStoreError(f"no Arrow type for {kind}")


def arrow_schema(schema: T.StructType) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.dataType), nullable=True) for f in schema.fields])


def _shape(kind: pa.DataType) -> str:
    """A type's text without what Iceberg and Arrow may spell differently for the same column:
    nullability, field ids, and large against regular strings, binaries and lists."""
    if pa.types.is_struct(kind):
        return "struct<" + ", ".join(f"{f.name}: {_shape(f.type)}" for f in kind) + ">"
    if pa.types.is_map(kind):
        return f"map<{_shape(kind.key_type)}, {_shape(kind.item_type)}>"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return f"list<{_shape(kind.value_type)}>"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "binary"
    return str(kind)


def schema_difference(found: pa.Schema, wanted: pa.Schema) -> str | None:
    """How a table's columns (``found``) differ from the ones this code writes, or None if alike."""
    have = [f"{f.name}: {_shape(f.type)}" for f in found]
    need = [f"{f.name}: {_shape(f.type)}" for f in wanted]
    if have == need:
        return None
    extra = [c for c in have if c not in need]
    missing = [c for c in need if c not in have]
    parts = [f"has {', '.join(extra)}"] if extra else []
    parts += [f"lacks {', '.join(missing)}"] if missing else []
    return "; ".join(parts) or "has the same columns in another order"


@dataclass(frozen=True, order=True)
class FileTask:
    """One live data file of a table and the position delete files (path, rows) that apply to it."""

    path: str
    bucket: int
    rows: int
    deletes: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class TableState:
    """What the snapshot table says about the last run."""

    watermarks: dict[str, str]
    start_time: float | None
    buckets: int
    run: int  # runs committed so far (0: created, never committed)

    @property
    def version(self) -> str:
        return f"{self.run:06d}"


def _catalog(snapshot_uri: str, region: str | None, endpoint_url: str | None) -> Any:
    if is_local(snapshot_uri):
        from pyiceberg.catalog.sql import SqlCatalog

        root = local_path(snapshot_uri).resolve()
        root.mkdir(parents=True, exist_ok=True)
        return SqlCatalog(
            CATALOG,
            uri=f"sqlite:///{root / 'catalog.db'}",
            warehouse=(root / "warehouse").as_uri(),
        )
    from pyiceberg.catalog.glue import GlueCatalog

    properties = {"warehouse": join(snapshot_uri, "warehouse")}
    if region:
        properties["glue.region"] = region
        properties["s3.region"] = region
    if endpoint_url:  # an emulator of Glue (tests); AWS otherwise
        properties["glue.endpoint"] = endpoint_url
    return GlueCatalog(CATALOG, **properties)


class SnapshotTables:
    """The snapshot's two Iceberg tables: create, read their files and properties, commit a run."""

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
        self.keys = keys
        self.catalog = catalog if catalog is not None else _catalog(snapshot_uri, region, glue_endpoint)

    # ------------------------------------------------------------------------------- reading

    def _load(self, name: str) -> Any | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(name)
        except NoSuchTableError:
            return None

    def items_table(self) -> Any | None:
        return self._load(self.items_name)

    def state(self) -> TableState | None:
        """The last run's bookkeeping, or None before the first run (or bootstrap)."""
        table = self.items_table()
        if table is None:
            return None
        props = table.properties
        try:
            marks = {str(k): str(v) for k, v in json.loads(props.get(WATERMARKS, "{}")).items()}
            start = props.get(START_TIME)
            return TableState(
                marks,
                float(start) if start else None,
                int(props.get(BUCKETS, DEFAULT_BUCKETS)),
                int(props.get(RUN, 0)),
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise SnapshotStoreError(f"{self.items_name}: unreadable consumer.* properties: {exc}") from exc

    def snapshot_ids(self) -> dict[str, int | None]:
        """The current snapshot of the items and tombstones tables (None: no table or no snapshot
        yet): taken before a run reads them, and checked again by :meth:`commit`."""
        tables = {name: self._load(name) for name in (self.items_name, self.tombstones_name)}
        return {name: None if table is None else _snapshot_id(table) for name, table in tables.items()}

    def tasks(self, name: str, buckets: Iterable[int] | None = None) -> list[FileTask]:
        """The live data files of one table (all, or those of the given buckets), each with the
        position delete files that apply to it, in the table's current snapshot."""
        table = self._load(name)
        if table is None or table.current_snapshot() is None:
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

    def data_files(self, name: str, buckets: Iterable[int] | None = None) -> list[str]:
        """The data files of one table (all, or those of the given buckets) in its current snapshot."""
        return [task.path for task in self.tasks(name, buckets)]

    # ------------------------------------------------------------------------------- writing

    def _create(self, name: str, buckets: int) -> Any:
        schema = arrow_schema(stored_schema(self.keys))
        if self.namespace not in {".".join(n) for n in self.catalog.list_namespaces()}:
            self.catalog.create_namespace_if_not_exists(self.namespace)
        location = join(self.snapshot_uri, "warehouse", *name.split("."))
        # Loaded first: creating writes a metadata file before the catalog refuses a second table,
        # and every run would leave one behind.
        table = self._load(name)
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
        * As many old metadata files as snapshots kept (:meth:`_expire`), the older ones deleted.
        """
        from pyiceberg.table import TableProperties

        return {
            TableProperties.COMMIT_NUM_RETRIES: "0",
            TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: str(self.snapshots_kept),
            TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
        }

    def ensure(self, buckets: int = DEFAULT_BUCKETS) -> int:
        """Create both tables if missing; returns the bucket count the snapshot table has."""
        items = self._create(self.items_name, buckets)
        count = int(items.properties.get(BUCKETS, buckets))
        self._create(self.tombstones_name, count)
        self._create(self.base_name, count)
        return count

    def commit_base(self, files: Sequence[str], start_time: float) -> None:
        """A bootstrap: the base table holds ``files`` (the table's state at ``start_time``), and the
        snapshot table's next run is a full one (base + every change from ``start_time`` on)."""
        base = self._load(self.base_name)
        items = self._load(self.items_name)
        if base is None or items is None:
            raise SnapshotStoreError(f"{self.base_name} or {self.items_name} vanished during the bootstrap")
        self._replace(base, None, files, deletes={}, deletes_folder="", properties={})
        with items.transaction() as tx:
            tx.set_properties(**{START_TIME: repr(float(start_time)), WATERMARKS: "{}", RUN: "0"})

    def data_uri(self, run_id: str) -> str:
        """Where a run's Spark job writes its Parquet files before they are added to the tables."""
        return join(self.snapshot_uri, "warehouse", "runs", run_id)

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
    ) -> str:
        """One run: in each table, every file of its ``*_buckets`` (None: of every bucket) is replaced
        by the new files, and the rows named in ``*_deletes`` (bucket → a table of data file path and
        row position, :data:`pipeline.deletes.POSITION_DELETE_ARROW`) are deleted through position
        delete files written under ``deletes_folder``.

        Tombstones first, then the snapshot table with its properties: a failure in between leaves
        the snapshot table — and its watermarks — as they were, and the next run recomputes those
        buckets from the same changes (the merge is a max per key, and it deletes every older row of
        a key it finds, so applying a change twice is harmless). Returns the snapshot's new version
        (``consumer.run``, six digits).

        ``read_at`` (:meth:`snapshot_ids` when the run began): if either table has moved since,
        another run committed in between and this run's plan (which buckets to replace, which rows
        to delete) is stale, so nothing is written (:class:`ConcurrentRunError`). From here on each
        table's commit requires the snapshot loaded here to still be current (Iceberg's optimistic
        concurrency), so no other run can slip in unnoticed. ``planned`` (per table name, the files
        of the buckets the run touched, as it planned them at ``read_at``) then spares planning the
        tables again.
        """
        properties = {k: str(v) for k, v in summary.items()}
        tombstones = self._load(self.tombstones_name)
        items = self._load(self.items_name)
        if tombstones is None or items is None:
            raise SnapshotStoreError(
                f"table {self.tombstones_name} or {self.items_name} vanished during the run"
            )
        if read_at is not None:
            moved = [
                name
                for name, table in ((self.items_name, items), (self.tombstones_name, tombstones))
                if _snapshot_id(table) != read_at.get(name)
            ]
            if moved:
                raise ConcurrentRunError(
                    f"{', '.join(moved)} changed while this run was merging (another snapshot run "
                    f"committed); {_RUN_AGAIN}"
                )
        from pyiceberg.exceptions import CommitFailedException

        try:
            self._replace(
                tombstones,
                tombstone_buckets,
                tombstone_files,
                planned=None if planned is None else planned[self.tombstones_name],
                deletes=tombstone_deletes or {},
                deletes_folder=deletes_folder,
                properties=properties,
            )
        except CommitFailedException as exc:
            raise ConcurrentRunError(
                f"{self.tombstones_name} changed while this run was committing (another snapshot run "
                f"committed first: {exc}); {_RUN_AGAIN}"
            ) from exc
        run = int(items.properties.get(RUN, 0)) + 1
        try:
            self._replace(
                items,
                item_buckets,
                item_files,
                planned=None if planned is None else planned[self.items_name],
                deletes=item_deletes or {},
                deletes_folder=deletes_folder,
                properties=properties,
                table_properties={
                    RUN: str(run),
                    WATERMARKS: json.dumps(dict(sorted(watermarks.items())), sort_keys=True),
                },
            )
        except Exception as exc:
            raise HalfCommittedError(
                f"{self.tombstones_name} committed this run but {self.items_name} did not ({exc}); "
                f"run the snapshot again: it merges the same changes and repairs {self.items_name}"
            ) from exc
        return f"{run:06d}"

    def live_rows(self, name: str) -> int:
        """Rows a reader sees in one table: its records minus its position deletes (each of ours
        deletes one live row, and a rewritten bucket's delete files leave with its data files)."""
        table = self._load(name)
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is None or snapshot.summary is None:
            return 0
        totals = snapshot.summary.additional_properties
        return int(totals.get("total-records", 0)) - int(totals.get("total-position-deletes", 0))

    def _replace(
        self,
        table: Any,
        buckets: Iterable[int] | None,
        files: Sequence[str],
        *,
        deletes: Mapping[int, pa.Table],
        deletes_folder: str,
        properties: Mapping[str, str],
        table_properties: Mapping[str, str] | None = None,
        planned: Sequence[FileTask] | None = None,
    ) -> None:
        """One Iceberg snapshot of ``table``: the buckets' files out, ``files`` in, ``deletes`` applied.

        ``planned``: the table's current files in (at least) every bucket named, already planned."""
        from pyiceberg.io.pyarrow import parquet_file_to_data_file
        from pyiceberg.table import TableProperties
        from pyiceberg.utils.concurrent import ExecutorFactory

        from pipeline.deletes import (
            POSITION_DELETE_ARROW,
            RowDelta,
            read_position_deletes,
            write_position_deletes,
        )

        name = ".".join(table.name())
        wanted = None if buckets is None else sorted(set(buckets))
        removed: list[str] = []

        def current(buckets: list[int] | None) -> list[FileTask]:
            if planned is None or buckets is None:
                return self.tasks(name, buckets)
            chosen = set(buckets)
            return [task for task in planned if task.bucket in chosen]

        if wanted is None or wanted:
            for task in current(wanted):
                removed.append(task.path)
                removed.extend(path for path, _ in task.deletes)
        metadata = table.metadata
        added = list(
            ExecutorFactory.get_or_create().map(
                lambda f: parquet_file_to_data_file(table.io, metadata, f), files
            )
        )
        # A patched bucket keeps one delete file per table: its older ones are folded into the new
        # one and leave in the same commit (readers open every delete file of a bucket).
        older: dict[int, set[str]] = {}
        for task in current(sorted(deletes)) if deletes else []:
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
                    tx, removed=set(removed), added=added, deletes=delete_files, properties=dict(properties)
                ):
                    pass
            self._expire(tx)
            if table_properties:
                tx.set_properties(**dict(table_properties))

    def _expire(self, tx: Any) -> None:
        """Keep the newest :attr:`snapshots_kept` snapshots of the table's history (time travel
        reaches back that many runs): every commit copies and rewrites the table's metadata whole,
        so, kept forever, each run's commit would cost more than the last. Only the current
        snapshot's ancestors are expired, never the head of a branch or a tag someone made. The
        data files only expired snapshots name stay where they are (nothing deletes them yet)."""
        from pyiceberg.table.update.snapshot import ExpireSnapshots

        metadata = tx.table_metadata
        history: list[int] = []
        snapshot = metadata.current_snapshot()
        while snapshot is not None:
            history.append(snapshot.snapshot_id)
            parent = snapshot.parent_snapshot_id
            snapshot = None if parent is None else metadata.snapshot_by_id(parent)
        protected = {ref.snapshot_id for ref in metadata.refs.values()}
        old = [snapshot_id for snapshot_id in history[self.snapshots_kept :] if snapshot_id not in protected]
        if old:
            ExpireSnapshots(tx).by_ids(old).commit()


def _snapshot_id(table: Any) -> int | None:
    current = table.current_snapshot()
    return None if current is None else int(current.snapshot_id)


def parquet_files(listing: Iterable[str]) -> list[str]:
    return sorted(f for f in listing if f.endswith(".parquet"))


def as_file_uri(path: str) -> str:
    """A local path → file:// URI (what PyIceberg's file IO expects); other URIs unchanged."""
    if is_local(path) and not path.startswith("file:"):
        return f"file://{Path(path).resolve()}"  # not percent-encoded: PyIceberg opens the path as is
    return path

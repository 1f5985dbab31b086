"""Entry points of the pipeline: the only code that reads and writes.

Runs locally through ``consumer pipeline snapshot|bootstrap|stats|verify --env X`` and on a cluster
through ``spark-submit pipeline/jobs.py snapshot|bootstrap|stats|verify --env X`` (or ``python -m
pipeline.jobs``); both call :func:`run_snapshot`, :func:`run_bootstrap`, :func:`run_stats` and
:func:`run_verify`. The snapshot is Iceberg tables (:mod:`pipeline.table`): Spark writes the Parquet
files, PyIceberg registers them in the catalog.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from ground.settings import Settings
from pipeline import bootstrap, chart, compare, locate, parse, patch, rewrite, snapshot, stats
from pipeline.changelog import may_hold_copies, select_objects
from pipeline.errors import BadChangeLogError, HalfCommittedError, PipelineError, SnapshotStoreError
from pipeline.layout import Plan, bucket_files, plan_buckets
from pipeline.reading import FILE, POS, read_live, small_frame, to_arrow
from pipeline.schemas import CREATED, ITEM_COLUMN, SEQUENCE, SHARD_ID, KeySchema
from pipeline.storage import Store, join, spark_uri, store_for
from pipeline.table import (
    BUCKET,
    DEFAULT_BUCKETS,
    FileTask,
    SnapshotTables,
    arrow_schema,
    as_file_uri,
    namespace_for,
    stored_schema,
)
from pipeline.table_scan import scan_items

Progress = Callable[[str], None]
ResultT = TypeVar("ResultT")
REPORTED_BAD_LINES = 20
_UNREADABLE = re.compile(
    r"FAILED_READ_FILE|Encountered error while reading file|not in GZIP format|EOFException|"
    r"ZipException|Unexpected end of input stream|CORRUPT|FileNotFoundException",
    re.IGNORECASE,
)
_PATH_IN_ERROR = re.compile(r"((?:file|s3a?|s3n|hdfs)://?[^\s,;\"']+)")


def _quiet(_: str) -> None:
    return None


# ------------------------------------------------------------------------------------ reading


def read_lines(spark: SparkSession, uris: Sequence[str]) -> DataFrame:
    """The change log's lines (:data:`pipeline.schemas.RAW_LINES`); gzip is decompressed by name."""
    text = spark.read.text([spark_uri(u) for u in uris])
    return text.select(
        "value",
        F.col("_metadata.file_path").alias("file"),
        F.monotonically_increasing_id().alias("position"),
    )


def _reading(action: Callable[[], ResultT]) -> ResultT:
    """Run a Spark action over the change log; an object that cannot be read names itself."""
    try:
        return action()
    except Exception as exc:  # py4j / pyspark wrap the JVM's exception; classified by its text
        message = str(exc)
        if not _UNREADABLE.search(message):
            raise
        found = _PATH_IN_ERROR.search(message)
        where = found.group(1) if found else "(the error names no object)"
        first_line = next((line for line in message.splitlines() if line.strip()), message)[:300]
        raise BadChangeLogError(f"1 unreadable change-log object: {where}: {first_line}") from exc


@dataclass(frozen=True)
class ParsedLog:
    parsed: DataFrame
    raw: DataFrame
    lines: int
    bad: int


def _parse_checked(
    spark: SparkSession, uris: Sequence[str], keys: KeySchema, tolerate: int, progress: Progress
) -> ParsedLog:
    """Parse the objects, report every malformed line with its location, fail beyond ``tolerate``."""
    raw = read_lines(spark, uris)
    # Parsed once and kept: validation, watermarks and the merge all read it (never the JSON again).
    parsed = parse.parse_lines(raw, keys).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = _reading(
            lambda: {
                row["bad"]: row["n"]
                for row in parsed.groupBy(F.col("_problem").isNotNull().alias("bad"))
                .agg(F.count(F.lit(1)).alias("n"))
                .collect()
            }
        )
        bad = int(counts.get(True, 0))
        lines = bad + int(counts.get(False, 0))
        _report_bad_lines(parsed, raw, (bad, lines), tolerate, progress)
    except BaseException:
        parsed.unpersist()
        raise
    return ParsedLog(parsed, raw, lines, bad)


# ----------------------------------------------------------------------------------- snapshot


@dataclass(frozen=True)
class SnapshotResult:
    version: str | None  # the snapshot table's Iceberg snapshot id after the run
    up_to_date: bool  # True: nothing new, nothing written
    objects_read: int = 0
    objects_already_merged: int = 0
    lines: int = 0
    bad_lines: int = 0
    new_changes: int = 0
    items: int = 0
    tombstones: int = 0
    ignored_files: tuple[str, ...] = field(default_factory=tuple)
    buckets_changed: int | None = None  # None: every bucket (a full rebuild or the first run)
    buckets_patched: int = 0  # of those, patched in the items table (deletes + new file), not rewritten


def snapshot_tables(settings: Settings) -> SnapshotTables:
    """The environment's snapshot tables: SQLite catalog locally, the Glue Data Catalog on S3."""
    return SnapshotTables(
        settings.pipeline.snapshot_uri,
        namespace_for(settings.application_name, settings.env),
        settings.table.name,
        KeySchema.of(settings.table),
        region=settings.region,
        snapshots_kept=settings.pipeline.snapshots_kept,
    )


def read_snapshot(
    spark: SparkSession, settings: Settings, store: Store | None = None, tables: SnapshotTables | None = None
) -> DataFrame:
    """The current snapshot's items (the snapshot table's data files); an error before the first run."""
    keys = KeySchema.of(settings.table)
    tables = tables or snapshot_tables(settings)
    if tables.state() is None:
        raise PipelineError(
            f"no snapshot at {settings.pipeline.snapshot_uri} yet: run `consumer pipeline snapshot` first"
        )
    return read_live(spark, stored_schema(keys), tables.tasks(tables.items_name))


def _with_bucket(frame: DataFrame, keys: KeySchema, buckets: int) -> DataFrame:
    bucket = F.pmod(F.xxhash64(*[F.col(n) for n in keys.names]), F.lit(buckets)).cast("int")
    return frame.withColumn(BUCKET, bucket)


@dataclass(frozen=True)
class IncrementalMerge:
    """What an incremental run writes (``rows``) and what it learnt on the way (``patched``, kept)."""

    rows: DataFrame
    patched: DataFrame
    plans: dict[str, Plan]  # per table ("items", "tombstones"): which buckets it rewrites, which it patches
    files: list[FileTask]  # the touched buckets' data files, both tables: a row's FILE indexes this
    kinds: list[str]  # per file, the table it belongs to: "items" or "tombstones"
    driver_rewrite: bool = False  # the rewritten buckets are left to the driver (pipeline/rewrite.py)

    def outcome(
        self, tables: SnapshotTables, out: str, stored: T.StructType, written: list[str]
    ) -> tuple[int, dict[str, dict[int, pa.Table]], list[str]]:
        """New changes merged, the position deletes of the patched buckets (kind → bucket →
        :data:`pipeline.deletes.POSITION_DELETE_ARROW`), and the run's data files (``written``:
        what Spark wrote into ``out``). Two small jobs over the kept patch, and only the deletes come
        to the driver, which writes their files (a patched bucket has fewer than
        ``rewrite_deleted_share`` of its rows deleted). They stay Arrow columns from the JVM to
        the delete files: Python rows cost a third of a second per 10 000 deletes.

        With :attr:`driver_rewrite`, the replaced rows of the rewritten buckets come along too, and
        the driver writes each of those buckets as one file: its kept rows, then the run's new rows
        Spark wrote for it, whose file it replaces (:func:`pipeline.rewrite.rewrite_bucket`)."""
        total = _reading(lambda: self.patched.agg(F.sum(snapshot.CHANGES)).first())
        deletes: dict[str, dict[int, pa.Table]] = {"items": {}, "tombstones": {}}
        replaced: dict[str, dict[int, pa.Table]] = {"items": {}, "tombstones": {}}
        parts = ["patch", "rewrite"] if self.driver_rewrite else ["patch"]
        if any(getattr(plan, part) for plan in self.plans.values() for part in parts):
            wanted = _in_buckets(self.plans, "patch", self.kinds)
            if self.driver_rewrite:
                wanted = wanted | _in_buckets(self.plans, "rewrite", self.kinds)
            gone = patch.deleted_rows(self.patched).filter(wanted)
            found = _reading(lambda: to_arrow(gone.select(BUCKET, FILE, POS)))
            places = found.column(FILE).combine_chunks()
            paths = pa.array([task.path for task in self.files], pa.string()).take(places)
            positions = pa.table({"file_path": paths, "pos": found.column(POS).combine_chunks()})
            items = len(self.kinds) - self.kinds.count("tombstones")
            in_items = pc.less(places, items)
            buckets = found.column(BUCKET).combine_chunks()
            for kind, mask in (("items", in_items), ("tombstones", pc.invert(in_items))):
                for bucket in pc.unique(pc.filter(buckets, mask)).to_pylist():
                    chosen = positions.filter(pc.and_(mask, pc.equal(buckets, bucket)))
                    (deletes if bucket in self.plans[kind].patch else replaced)[kind][bucket] = chosen
        if self.driver_rewrite:
            written = self._rewrite(tables, out, stored, replaced, written)
        return int(total[0] or 0) if total is not None else 0, deletes, written

    def _rewrite(
        self,
        tables: SnapshotTables,
        out: str,
        stored: T.StructType,
        replaced: dict[str, dict[int, pa.Table]],
        written: list[str],
    ) -> list[str]:
        """Each rewritten bucket that the table holds, as one file the driver writes into ``out``
        in place of Spark's file of its new rows; the run's data files after that."""
        table = tables.items_table()
        if table is None:
            raise SnapshotStoreError(f"table {tables.items_name} vanished during the run")
        schema = arrow_schema(stored)
        jobs: list[tuple[list[FileTask], pa.Table | None, list[str], str]] = []
        for kind, plan in self.plans.items():
            for bucket in sorted(plan.rewrite):
                tasks = [
                    t for t, k in zip(self.files, self.kinds, strict=True) if k == kind and t.bucket == bucket
                ]
                if not tasks:
                    continue  # a bucket the table does not hold yet: Spark's file of its new rows is all
                folder = as_file_uri(join(out, f"kind={kind}", f"b={bucket}"))
                fresh = [f for f in written if f.startswith(folder + "/")]
                jobs.append((tasks, replaced[kind].get(bucket), fresh, folder))

        def one(job: tuple[list[FileTask], pa.Table | None, list[str], str]) -> str | None:
            tasks, gone, fresh, folder = job
            return rewrite.rewrite_bucket(table, tasks, gone, fresh=fresh, schema=schema, folder=folder)

        # A few buckets at once: on S3 each file is requests to wait for (the tombstones' buckets,
        # rewritten every run, are many small files).
        with ThreadPoolExecutor(max_workers=rewrite.THREADS) as pool:
            locations = list(pool.map(one, jobs))
        folded = {path for _, _, fresh, _ in jobs for path in fresh}
        for path in sorted(folded):
            table.io.delete(path)
        return [f for f in written if f not in folded] + [loc for loc in locations if loc is not None]

    def planned(self, tables: SnapshotTables) -> dict[str, list[FileTask]]:
        """Per table name, the touched buckets' files as this run planned them (what its commit
        replaces and folds: the tables cannot have moved since, :meth:`SnapshotTables.commit`)."""
        names = {"items": tables.items_name, "tombstones": tables.tombstones_name}
        planned: dict[str, list[FileTask]] = {name: [] for name in names.values()}
        for task, kind in zip(self.files, self.kinds, strict=True):
            planned[names[kind]].append(task)
        return planned


def _in_buckets(plans: dict[str, Plan], part: str, kinds: list[str]) -> Column:
    """True for a located row (:data:`FILE`, :data:`BUCKET`) in a bucket its table's plan puts in
    ``part`` ("rewrite" or "patch"). The files are numbered items first, then tombstones."""
    items = kinds.count("items")
    chosen = {kind: sorted(getattr(plan, part)) for kind, plan in plans.items()}
    in_items = (F.col(FILE) < F.lit(items)) & F.col(BUCKET).isin(chosen["items"])
    in_tombstones = (F.col(FILE) >= F.lit(items)) & F.col(BUCKET).isin(chosen["tombstones"])
    return in_items | in_tombstones


def _merge_incremental(
    spark: SparkSession,
    settings: Settings,
    *,
    tables: SnapshotTables,
    changes: DataFrame,
    changed: dict[int, int],
    run: int,
    driver_rows: int = locate.DRIVER_ROWS,
) -> IncrementalMerge:
    """The rows an incremental run writes, and what it deletes.

    Every changed key is first located among the touched buckets' live rows (only the columns
    that order changes are read): on the driver if the buckets hold at most ``driver_rows`` rows
    and the run at most as many changes (:mod:`pipeline.locate`), by Spark otherwise. It is then
    merged with its new changes (:func:`pipeline.patch.patch`): that says which rows a winning
    change replaces and what it writes. Then, per bucket of each table
    (:func:`pipeline.layout.plan_buckets`), a patched bucket gets the new rows in a new file and
    position deletes for the replaced ones; a rewritten bucket is read whole, once, without the
    replaced rows (and its older deletes), and written again with the new rows.
    """
    keys = KeySchema.of(settings.table)
    stored = stored_schema(keys)
    touched = sorted(changed)
    items = tables.tasks(tables.items_name, touched)
    tombstones = tables.tasks(tables.tombstones_name, touched)
    files = [*items, *tombstones]
    kinds = ["items"] * len(items) + ["tombstones"] * len(tombstones)
    plans = {
        kind: plan_buckets(
            bucket_files(tasks),
            changed,
            rewrite_deleted_share=settings.pipeline.rewrite_deleted_share,
            max_files_per_bucket=settings.pipeline.max_files_per_bucket,
            run=run,
        )
        for kind, tasks in (("items", items), ("tombstones", tombstones))
    }
    columns = [*keys.names, BUCKET, *patch.ORDER_COLUMNS]
    # The driver holds every change's key and reads every touched row: both must be few.
    on_driver = max(sum(task.rows for task in files), sum(changed.values())) <= driver_rows
    if on_driver:
        # Not distinct(): a shuffle and its job cost more than the driver's de-duplication.
        wanted = (
            _reading(lambda: to_arrow(changes.select(BUCKET, *keys.names)))
            .group_by([BUCKET, *keys.names])
            .aggregate([])
        )
        schema = arrow_schema(T.StructType([stored[name] for name in columns]))
        found = locate.locate(tables.items_table(), files, wanted, keys.names, schema)
        located = small_frame(spark, {name: found.column(name) for name in found.column_names})
    else:
        only = changes.select(*keys.names).distinct()
        located = read_live(spark, stored, files, columns=columns, locate=True, only=only, keys=keys.names)
    patched = patch.patch(located, changes, keys).persist(StorageLevel.MEMORY_AND_DISK)
    rows = patch.new_rows(patched, keys)
    rewritten = [task for task, kind in zip(files, kinds, strict=True) if task.bucket in plans[kind].rewrite]
    # The kept rows of a rewritten bucket are copied as they are: by the driver when they are few
    # (no job, no shuffle of whole items: pipeline/rewrite.py), else read here and written by Spark.
    driver_rewrite = on_driver and sum(task.rows for task in rewritten) <= min(
        driver_rows, rewrite.DRIVER_REWRITE_ROWS
    )
    if rewritten and not driver_rewrite:
        replaced = patch.deleted_rows(patched).filter(_in_buckets(plans, "rewrite", kinds))
        kept = read_live(spark, stored, rewritten, numbering=files, also_deleted=replaced)
        rows = rows.unionByName(kept.withColumn(snapshot.CHANGES, F.lit(0)))
    return IncrementalMerge(
        snapshot.by_bucket(rows, len(touched)),
        patched,
        plans,
        files,
        kinds,
        driver_rewrite and bool(rewritten),
    )


def _report_bad_lines(
    parsed: DataFrame, raw: DataFrame, counts: tuple[int, int], tolerate: int, progress: Progress
) -> None:
    bad, lines = counts
    if not bad:
        return
    shown = parse.bad_lines(parse.problems(parsed), raw).orderBy("file", "line")
    listing = [
        f"  {row['file']}:{row['line']}: {row['problem']}: {row['text']!r}"
        for row in _reading(lambda: shown.limit(REPORTED_BAD_LINES).collect())
    ]
    more = f"\n  … and {bad - len(listing)} more" if bad > len(listing) else ""
    report = f"{bad} malformed change-log line(s) of {lines}:\n" + "\n".join(listing) + more
    if bad > tolerate:
        raise BadChangeLogError(
            f"{report}\nthe run tolerates {tolerate} (pipeline.tolerate_bad_lines or "
            f"--tolerate-bad-lines); nothing was written"
        )
    progress(f"warning: {report}\n  tolerated ({bad} <= {tolerate}); these lines are not in the result")


def _name_watermarks(selection: Any) -> dict[str, str]:
    """Per shard, the highest last sequence number named by the objects read (the sink's contract)."""
    marks: dict[str, str] = {}
    for obj in selection.to_read:
        if obj.shard_id is not None and obj.last is not None and obj.last > marks.get(obj.shard_id, ""):
            marks[obj.shard_id] = obj.last
    return marks


def run_snapshot(
    spark: SparkSession,
    settings: Settings,
    *,
    full: bool = False,
    tolerate_bad_lines: int | None = None,
    store: Store | None = None,
    progress: Progress = _quiet,
    tables: SnapshotTables | None = None,
    buckets: int = DEFAULT_BUCKETS,
    driver_rows: int = locate.DRIVER_ROWS,
) -> SnapshotResult:
    """Merge the changes after the table's watermarks into the snapshot table, bucket by bucket.

    Incremental: only the buckets holding a changed key are read and rewritten; ``full`` rebuilds
    every bucket from the whole change log (and the bootstrap's base, if any): the same result.
    ``buckets`` is used when the tables are created (afterwards the table's own count holds);
    ``driver_rows``: see :func:`_merge_incremental`.
    """
    config = settings.pipeline
    keys = KeySchema.of(settings.table)
    tolerate = config.tolerate_bad_lines if tolerate_bad_lines is None else tolerate_bad_lines
    log_store = store or store_for(config.changelog_uri, spark)
    out_store = store or store_for(config.snapshot_uri, spark)
    tables = tables or snapshot_tables(settings)
    read_at = tables.snapshot_ids()  # before anything is read: commit checks that nothing moved
    state = tables.state()
    incremental = state is not None and state.run > 0 and not full
    marks = state.watermarks if (incremental and state is not None) else {}
    start_time = state.start_time if state is not None else None

    selection = select_objects(log_store.list_files(config.changelog_uri), marks)
    progress(
        f"[1/4] change log {config.changelog_uri}: {len(selection.to_read)} object(s) to read, "
        f"{selection.already_merged} already merged"
        + (f", {len(selection.ignored)} other file(s) ignored" if selection.ignored else "")
    )
    if incremental and not selection.to_read and state is not None:
        progress(f"[4/4] snapshot {tables.items_name} is up to date; nothing written")
        return SnapshotResult(
            state.version, True, 0, selection.already_merged, ignored_files=selection.ignored
        )
    count = tables.ensure(buckets)
    stored = stored_schema(keys)
    names = stored.fieldNames()
    lines = bad = 0
    raw = parsed = None
    line_observation = Observation("lines")
    if selection.to_read:
        raw = read_lines(spark, [o.uri for o in selection.to_read])
        # A rebuild keeps items in wire form and types only each key's winner; an incremental run
        # types its (few) changes at once.
        parsed = _with_bucket(parse.parse_lines(raw, keys, typed=incremental), keys, count)
        if not incremental:  # one pass: the lines are counted as the merge reads them
            parsed = parsed.observe(
                line_observation,
                F.count(F.lit(1)).alias("lines"),
                F.count_if(F.col("_problem").isNotNull()).alias("bad"),
            )
        changes = parse.valid_changes(parsed, keys, extra=(BUCKET,))
        if marks:
            shards = sorted(marks)
            previous_marks = small_frame(
                spark,
                {
                    "shard_id": pa.array(shards, pa.string()),
                    "sequence_number": pa.array([marks[s] for s in shards], pa.string()),
                },
            )
            changes = snapshot.after_watermarks(changes, previous_marks)
        if start_time is not None:  # the bootstrap's state already holds every older change
            changes = changes.filter(F.col(CREATED).isNull() | (F.col(CREATED) >= F.lit(start_time)))
    else:
        changes = spark.createDataFrame([], stored)
    changes = changes.select(*names).withColumn(snapshot.NEW, F.lit(True))

    run_id = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    out = tables.data_uri(run_id)
    cached: list[DataFrame] = []
    try:
        observation = Observation("snapshot")  # the run's distinct new changes
        touched: list[int] | None = None
        rewritten: dict[str, list[int]] | None = None  # per table, buckets replaced whole (None: all)
        incremental_merge: IncrementalMerge | None = None
        if incremental:
            # Small (the changes since the last run): parsed once, kept, and its buckets listed.
            assert parsed is not None and raw is not None and state is not None
            parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(parsed)
            rows = _reading(
                lambda: parsed.groupBy(F.col("_problem").isNotNull().alias("bad"), BUCKET).count().collect()
            )
            bad = sum(int(r["count"]) for r in rows if r["bad"])
            lines = sum(int(r["count"]) for r in rows)
            _report_bad_lines(parsed, raw, (bad, lines), tolerate, progress)
            changed = {
                int(r[BUCKET]): int(r["count"]) for r in rows if not r["bad"] and r[BUCKET] is not None
            }
            touched = sorted(changed)
            incremental_merge = _merge_incremental(
                spark,
                settings,
                tables=tables,
                changes=changes,
                changed=changed,
                run=state.run + 1,
                driver_rows=driver_rows,
            )
            cached.append(incremental_merge.patched)
            rewritten = {kind: sorted(plan.rewrite) for kind, plan in incremental_merge.plans.items()}
            merged = incremental_merge.rows.observe(
                observation, F.coalesce(F.sum(F.col(snapshot.CHANGES)), F.lit(0)).alias("changes")
            )
        else:
            # A window merges, and rows are counted as changes, when no change can be in two objects
            # (the listing says: pipeline/changelog.py); else an aggregation counts them per key.
            base = read_live(spark, stored, tables.tasks(tables.base_name)) if start_time else None
            copies = may_hold_copies(selection.to_read)
            merged = snapshot.rebuild(changes, keys, base, buckets=count, copies=copies, counted=observation)
        progress(
            "[2/4] merging into "
            + (
                "every bucket"
                if touched is None or rewritten is None
                else f"{len(touched)} of {count} bucket(s): "
                + "; ".join(
                    f"{kind} {len(done)} rewritten, {len(touched) - len(done)} patched"
                    for kind, done in rewritten.items()
                )
            )
        )
        _reading(lambda: snapshot.write_parts(merged, out))
        written = [as_file_uri(f) for f in out_store.list_files(out) if f.endswith(".parquet")]
        new_changes = int(observation.get["changes"])
        deletes: dict[str, dict[int, pa.Table]] = {"items": {}, "tombstones": {}}
        if incremental_merge is not None:  # every changed key's count is in the patch, written or not
            new_changes, deletes, written = incremental_merge.outcome(tables, out, stored, written)
        if not incremental and raw is not None and parsed is not None:
            counted = line_observation.get
            lines, bad = int(counted["lines"]), int(counted["bad"])
            _report_bad_lines(parsed, raw, (bad, lines), tolerate, progress)
        progress(f"[3/4] parsed {lines} line(s): {new_changes} new change(s), {bad} malformed")
        item_files = [f for f in written if "/kind=items/" in f]
        tombstone_files = [f for f in written if "/kind=tombstones/" in f]
        new_marks = dict(marks)
        for shard, mark in _name_watermarks(selection).items():
            if mark > new_marks.get(shard, ""):
                new_marks[shard] = mark
        if selection.unconventional:
            assert parsed is not None
            for row in _reading(
                lambda: (
                    parse.valid_changes(parsed, keys)
                    .groupBy(SHARD_ID)
                    .agg(F.max(SEQUENCE).alias("m"))
                    .collect()
                )
            ):
                if row["m"] > new_marks.get(row[SHARD_ID], ""):
                    new_marks[row[SHARD_ID]] = row["m"]
        version = tables.commit(
            item_files=item_files,
            tombstone_files=tombstone_files,
            item_buckets=None if rewritten is None else rewritten["items"],
            tombstone_buckets=None if rewritten is None else rewritten["tombstones"],
            watermarks=new_marks,
            item_deletes=deletes["items"],
            tombstone_deletes=deletes["tombstones"],
            deletes_folder=as_file_uri(join(out, "deletes")),
            read_at=read_at,
            planned=None if incremental_merge is None else incremental_merge.planned(tables),
            summary={
                "consumer.objects-read": str(len(selection.to_read)),
                "consumer.lines": str(lines),
                "consumer.bad-lines": str(bad),
                "consumer.new-changes": str(new_changes),
            },
        )
    except HalfCommittedError:
        raise  # the tombstones table holds some of the run's files: they stay
    except BaseException:
        out_store.remove_tree(out)
        raise
    finally:
        for frame in cached:
            frame.unpersist()
    items, removed = tables.live_rows(tables.items_name), tables.live_rows(tables.tombstones_name)
    progress(f"[4/4] committed {tables.items_name} version {version} ({items} items, {removed} tombstones)")
    return SnapshotResult(
        version,
        False,
        len(selection.to_read),
        selection.already_merged,
        lines,
        bad,
        new_changes,
        items,
        removed,
        selection.ignored,
        None if touched is None else len(touched),
        0 if touched is None or rewritten is None else len(touched) - len(rewritten["items"]),
    )


def run_bootstrap(
    spark: SparkSession,
    settings: Settings,
    *,
    export_uri: str | None = None,
    segments: int = 4,
    store: Store | None = None,
    progress: Progress = _quiet,
    tables: SnapshotTables | None = None,
    buckets: int = DEFAULT_BUCKETS,
    now: float | None = None,
) -> SnapshotResult:
    """The first snapshot of a table with data: its export (``export_uri``, no older than the
    stream's retention at ``now``) or a parallel scan of ``segments`` segments becomes the base; then
    a full snapshot run merges the change log on top."""
    keys = KeySchema.of(settings.table)
    tables = tables or snapshot_tables(settings)
    out_store = store or store_for(settings.pipeline.snapshot_uri, spark)
    if export_uri is not None:
        manifest = bootstrap.read_export_manifest(store or store_for(export_uri, spark), export_uri)
        bootstrap.check_export_age(manifest, export_uri, now=time.time() if now is None else now)
        start_time = manifest.export_time
        rows = bootstrap.export_rows(spark, manifest, keys, spark_uri)
        source = f"export {export_uri} ({len(manifest.data_files)} data file(s), exportTime {start_time:.3f})"
    else:
        start_time = bootstrap.scan_start()
        table = settings.table.source_table_name
        rows = bootstrap.scan_rows(
            spark,
            keys,
            table=table,
            region=settings.region,
            endpoint_url=settings.endpoint_url,
            segments=segments,
            start_time=start_time,
        )
        source = f"parallel scan of {table} ({segments} segment(s), started {start_time:.3f})"
    progress(f"[bootstrap] reading the {source}")
    count = tables.ensure(buckets)
    out = tables.data_uri(f"base-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
    observation = Observation("base")
    observed = _with_bucket(rows, keys, count).observe(
        observation,
        F.count(F.lit(1)).alias("items"),
        F.count_if(F.greatest(*[F.col(n).isNull() for n in keys.names])).alias("keyless"),
    )
    try:
        _reading(lambda: snapshot.write_parts(observed, out))
        metrics = observation.get
        if int(metrics["keyless"]):
            raise bootstrap.BootstrapError(
                f"{metrics['keyless']} item(s) lack the table's key attributes {keys.names}: "
                "is this the table's export?"
            )
        files = [as_file_uri(f) for f in out_store.list_files(out) if f.endswith(".parquet")]
        tables.commit_base(files, start_time)
    except BaseException:
        out_store.remove_tree(out)
        raise
    progress(
        f"[bootstrap] base of {int(metrics['items'])} item(s) committed to {tables.base_name}; "
        f"changes created before {start_time:.3f} are in it"
    )
    return run_snapshot(spark, settings, full=True, store=store, progress=progress, tables=tables)


# -------------------------------------------------------------------------------------- stats


@dataclass(frozen=True)
class StatsResult:
    changes: int
    minutes: int
    shards: int
    lag: dict[str, float | None]
    chart: str


def run_stats(
    spark: SparkSession,
    settings: Settings,
    *,
    tolerate_bad_lines: int | None = None,
    store: Store | None = None,
    progress: Progress = _quiet,
) -> StatsResult:
    """Changes per minute by event type, lag percentiles and items per shard: Parquet and a PNG."""
    config = settings.pipeline
    keys = KeySchema.of(settings.table)
    tolerate = config.tolerate_bad_lines if tolerate_bad_lines is None else tolerate_bad_lines
    log_store = store or store_for(config.changelog_uri, spark)
    out_store = store or store_for(config.stats_uri, spark)
    selection = select_objects(log_store.list_files(config.changelog_uri), {})
    progress(f"[1/4] change log {config.changelog_uri}: {len(selection.to_read)} object(s)")
    if not selection.to_read:
        raise PipelineError(f"no change-log objects under {config.changelog_uri}: nothing to summarise")
    log = _parse_checked(spark, [o.uri for o in selection.to_read], keys, tolerate, progress)
    changes = snapshot.deduplicate(parse.valid_changes(log.parsed, keys)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        try:
            changes.count()  # materialised from the parsed lines, which are then released
        finally:
            log.parsed.unpersist()
        per_minute = stats.changes_per_minute(changes)
        lag = stats.lag_percentiles(changes)
        per_shard = stats.items_per_shard(changes, keys)
        progress(f"[2/4] parsed {log.lines} line(s), {log.bad} malformed")
        outputs = {"changes_per_minute": per_minute, "lag_percentiles": lag, "items_per_shard": per_shard}
        for name, frame in outputs.items():
            _write_parquet(frame, spark_uri(join(config.stats_uri, name)))
        progress(f"[3/4] wrote {', '.join(outputs)} under {config.stats_uri}")
        minute_rows = per_minute.collect()
        lag_row = lag.first()
        shards = per_shard.count()
        total = int(lag_row["changes"]) if lag_row else 0
    finally:
        changes.unpersist()
    with tempfile.TemporaryDirectory() as folder:
        local_png = chart.render(minute_rows, lag_row, Path(folder) / "changes.png")
        chart_uri = join(config.stats_uri, "changes.png")
        out_store.upload(local_png, spark_uri(chart_uri) if "://" not in chart_uri else chart_uri)
    lag_figures = {
        name: (None if lag_row is None or lag_row[name] is None else float(lag_row[name]))
        for name in ("p50_seconds", "p90_seconds", "p99_seconds", "max_seconds")
    }
    progress(f"[4/4] chart {chart_uri}")
    return StatsResult(total, len({row["minute"] for row in minute_rows}), shards, lag_figures, chart_uri)


def _write_parquet(frame: DataFrame, uri: str) -> None:
    _reading(lambda: frame.write.mode("overwrite").parquet(uri))


# ------------------------------------------------------------------------------------- verify


@dataclass(frozen=True)
class VerifyResult:
    counts: dict[str, int]
    examples: dict[str, list[str]]

    @property
    def differences(self) -> int:
        return sum(self.counts.get(status, 0) for status in ("missing", "extra", "stale"))


def run_verify(
    spark: SparkSession,
    settings: Settings,
    dynamodb: Any,
    *,
    store: Store | None = None,
    progress: Progress = _quiet,
    examples: int = 5,
) -> VerifyResult:
    """Compare the current snapshot with a consistent scan of the live table through ``dynamodb``."""
    keys = KeySchema.of(settings.table)
    items = read_snapshot(spark, settings, store)
    progress(f"[1/3] snapshot {settings.pipeline.snapshot_uri}: current version loaded")
    # The table the fleet reads (an imported one may be named apart from table.name); the EMR job
    # role may scan exactly that one.
    source = settings.table.source_table_name
    rows = [compare.table_row(item, keys) for item in scan_items(dynamodb, source)]
    table = spark.createDataFrame(rows, compare.table_schema(keys))
    progress(f"[2/3] scanned table {source}: {len(rows)} item(s)")
    result = compare.compare(items.select(*keys.names, ITEM_COLUMN), table, keys).persist()
    try:
        counts = {status: 0 for status in compare.STATUSES}
        counts.update(
            {row["status"]: int(row["count"]) for row in result.groupBy("status").count().collect()}
        )
        shown: dict[str, list[str]] = {}
        for status in ("missing", "extra", "stale"):
            if counts[status]:
                picked = result.filter(F.col("status") == status).orderBy("key").limit(examples).collect()
                shown[status] = [row["key"] for row in picked]
    finally:
        result.unpersist()
    progress("[3/3] " + ", ".join(f"{counts[s]} {s}" for s in ("match", "missing", "extra", "stale")))
    return VerifyResult(counts, shown)


# --------------------------------------------------------------------------------- spark-submit


def dynamodb_client(settings: Settings) -> Any:
    """The table's client, through the same endpoint settings the workers use."""
    import boto3

    return boto3.client("dynamodb", region_name=settings.region, endpoint_url=settings.endpoint_url)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="pipeline.jobs", description="Spark jobs over the change log (spark-submit-ready)."
    )
    parser.add_argument("job", choices=("snapshot", "bootstrap", "stats", "verify"))
    parser.add_argument("--env", default="local", help="environment: config/<env>.yaml (default: local)")
    parser.add_argument("--config-dir", default=None, help="configuration directory (default: ./config)")
    parser.add_argument("--master", default=None, help="Spark master (default: the submitter's)")
    parser.add_argument("--full", action="store_true", help="snapshot: rebuild from the whole change log")
    parser.add_argument(
        "--tolerate-bad-lines", type=int, default=None, help="override pipeline.tolerate_bad_lines"
    )
    add_bootstrap_arguments(parser)
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show Spark's own warnings and log4j banners"
    )
    return parser


def add_bootstrap_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--export",
        default=None,
        metavar="URI",
        help="bootstrap: a DynamoDB export's folder (DYNAMODB_JSON; default: a parallel scan)",
    )
    parser.add_argument(
        "--segments", type=int, default=4, help="bootstrap without --export: parallel scan segments (4)"
    )


def execute(args: argparse.Namespace, settings: Settings, master: str | None) -> int:
    """Run one job in a fresh session; the exit code is non-zero when verify finds a difference."""
    spark = build_session_for(master, verbose=bool(getattr(args, "verbose", False)))
    try:
        return _execute(spark, args, settings)
    finally:
        spark.stop()


def build_session_for(master: str | None, *, verbose: bool = False) -> SparkSession:
    from pipeline.session import build_session

    return build_session(master, verbose=verbose)


def _execute(spark: SparkSession, args: argparse.Namespace, settings: Settings) -> int:
    def say(line: str) -> None:
        print(line, flush=True)

    if args.job == "snapshot":
        run_snapshot(
            spark, settings, full=args.full, tolerate_bad_lines=args.tolerate_bad_lines, progress=say
        )
        return 0
    if args.job == "bootstrap":
        run_bootstrap(
            spark,
            settings,
            export_uri=getattr(args, "export", None),
            segments=int(getattr(args, "segments", 4)),
            progress=say,
        )
        return 0
    if args.job == "stats":
        result = run_stats(spark, settings, tolerate_bad_lines=args.tolerate_bad_lines, progress=say)
        figures = ", ".join(f"{k} {v:.3f}" for k, v in result.lag.items() if v is not None)
        spread = f"{result.minutes} minute(s) on {result.shards} shard(s)"
        say(f"{result.changes} changes over {spread}; lag {figures}")
        return 0
    verdict = run_verify(spark, settings, dynamodb_client(settings), progress=say)
    for status, keys in verdict.examples.items():
        say(f"{status}: " + ", ".join(keys))
    say("verify: OK" if verdict.differences == 0 else f"verify: {verdict.differences} difference(s)")
    return 0 if verdict.differences == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    from ground.settings import ConfigError, load_settings

    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args.env, args.config_dir)
        return execute(args, settings, args.master)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"configuration error: {problem}", file=sys.stderr)
        return 2
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

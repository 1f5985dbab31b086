"""The snapshot job: the changes after the table's watermarks, merged into the Iceberg tables.

One run lists the change log, plans its merge in one of two modes — a full rebuild of every bucket
(:mod:`pipeline.full_run`) or an incremental merge into the buckets the new changes touch
(:mod:`pipeline.incremental_run`), the same result either way — writes the plan's rows into a
folder of its own, and commits them with the new watermarks in one Iceberg commit per table. A run
that fails removes its folder; one that commits half (the tombstones table only) leaves it, and
the next run repairs the rest (:meth:`pipeline.table.SnapshotTables.commit`).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from ground.settings import Settings
from pipeline import full_run, incremental_run, locate, parse, reloads, snapshot
from pipeline.base_commit import commit_base
from pipeline.catalog import namespace_for
from pipeline.changelog import RELOADS, select_objects
from pipeline.errors import HalfCommittedError, PipelineError, SnapshotStoreError
from pipeline.log_lines import Progress, name_watermarks, quiet, reading
from pipeline.reading import read_live
from pipeline.run_plan import RunContext, RunPlan
from pipeline.schemas import SEQUENCE, SHARD_ID, KeySchema
from pipeline.storage import Store, join, store_for
from pipeline.stored import stored_schema
from pipeline.table import DEFAULT_BUCKETS, SnapshotTables, TableState, as_file_uri


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
    oldest_change: float | None = None  # the earliest creation time among the new changes (epoch s)


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


def _is_incremental(state: TableState | None, full: bool, tables: SnapshotTables) -> bool:
    """A run merges incrementally once a run has laid the table out by key ranges; a table that
    holds rows laid out otherwise (by an earlier version, by a hash of the key) must be rebuilt."""
    if full or state is None or state.run == 0:
        return False
    if state.ranges is not None:
        return True
    if tables.live_rows(tables.items_name) + tables.live_rows(tables.tombstones_name) > 0:
        raise SnapshotStoreError(
            f"{tables.items_name} was laid out by an earlier version (buckets by a hash of the key, "
            "not key ranges): run `consumer pipeline snapshot --full` once to lay it out again"
        )
    return False  # runs so far merged no key: the next one chooses the ranges


def run_snapshot(
    spark: SparkSession,
    settings: Settings,
    *,
    full: bool = False,
    tolerate_bad_lines: int | None = None,
    store: Store | None = None,
    progress: Progress = quiet,
    tables: SnapshotTables | None = None,
    buckets: int = DEFAULT_BUCKETS,
    driver_rows: int = locate.DRIVER_ROWS,
) -> SnapshotResult:
    """Merge the changes after the table's watermarks into the snapshot tables, bucket by bucket.

    Incremental: only the buckets holding a changed key are read and written; ``full`` rebuilds
    every bucket from the whole change log (and the bootstrap's base, if any): the same result.
    ``buckets`` is used when the tables are created (afterwards the table's own count holds);
    ``driver_rows``: see :func:`pipeline.incremental_run.merge_incremental`.
    """
    config = settings.pipeline
    keys = KeySchema.of(settings.table)
    log_store = store or store_for(config.changelog_uri, spark)
    out_store = store or store_for(config.snapshot_uri, spark)
    tables = tables or snapshot_tables(settings)
    listed_at = time.time()  # before the listing: every object landed by then is in it
    listing = log_store.list_files(config.changelog_uri)
    # The sink's _reloads/ folder: a listing of the change log leaves "_" names out (temporary files).
    landed = log_store.list_files(join(config.changelog_uri, RELOADS))
    reload = reloads.newer_reload(log_store, landed, None if (s := tables.state()) is None else s.start_time)
    if reload is not None:  # a trimmed gap repaired (pipeline/reloads.py): the reload is the new base
        rows = reloads.reload_rows(spark, reload, keys)
        items = commit_base(
            spark, settings, rows, reload.started_at, tables=tables, store=store, buckets=buckets
        )
        progress(
            f"[reload] reload {reload.reload_id} of {items} item(s) (shard {reload.shard_id}) is the new base; "
            f"changes created before {reload.started_at:.3f} are in it"
        )
        full = True
    read_at = tables.snapshot_ids()  # before anything is read: commit checks that nothing moved
    state = tables.state()
    incremental = _is_incremental(state, full, tables)
    marks = state.watermarks if (incremental and state is not None) else {}
    selection = select_objects(listing, marks)
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
    run = RunContext(
        spark,
        keys,
        tables,
        selection,
        state,
        marks,
        tables.ensure(buckets),
        config.tolerate_bad_lines if tolerate_bad_lines is None else tolerate_bad_lines,
        progress,
        config.rewrite_deleted_share,
        config.max_files_per_bucket,
    )
    out = tables.data_uri(f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
    plan: RunPlan | None = None
    try:
        if incremental:
            assert state is not None and state.ranges is not None
            plan = incremental_run.plan(run, state.ranges, driver_rows)
        else:
            plan = full_run.plan(run)
        progress(plan.describe)
        rows = plan.rows
        reading(lambda: snapshot.write_parts(rows, out, keys))
        outcome = plan.finish(
            out, [as_file_uri(f) for f in out_store.list_files(out) if f.endswith(".parquet")]
        )
        progress(
            f"[3/4] parsed {outcome.lines} line(s): {outcome.new_changes} new change(s), {outcome.bad} malformed"
        )
        version = tables.commit(
            item_files=[f for f in outcome.written if "/kind=items/" in f],
            tombstone_files=[f for f in outcome.written if "/kind=tombstones/" in f],
            item_buckets=None if plan.rewritten is None else plan.rewritten["items"],
            tombstone_buckets=None if plan.rewritten is None else plan.rewritten["tombstones"],
            watermarks=_new_watermarks(run, plan),
            item_deletes=outcome.deletes["items"],
            tombstone_deletes=outcome.deletes["tombstones"],
            deletes_folder=as_file_uri(join(out, "deletes")),
            read_at=read_at,
            planned=plan.planned,
            ranges=plan.ranges,
            listed_at=listed_at,
            summary={
                "consumer.objects-read": str(len(selection.to_read)),
                "consumer.lines": str(outcome.lines),
                "consumer.bad-lines": str(outcome.bad),
                "consumer.new-changes": str(outcome.new_changes),
            },
        )
    except HalfCommittedError:
        raise  # the tombstones table holds some of the run's files: they stay
    except BaseException:
        # Interrupted anywhere (Ctrl-C between the two tables' commits included), the folder goes
        # only if no table moved: files a commit named must stay (maintenance removes the others).
        if _unmoved(tables, read_at):
            out_store.remove_tree(out)
        raise
    finally:
        if plan is not None:
            plan.release()
    items, removed = tables.live_rows(tables.items_name), tables.live_rows(tables.tombstones_name)
    progress(f"[4/4] committed {tables.items_name} version {version} ({items} items, {removed} tombstones)")
    touched = plan.touched
    return SnapshotResult(
        version,
        False,
        len(selection.to_read),
        selection.already_merged,
        outcome.lines,
        outcome.bad,
        outcome.new_changes,
        items,
        removed,
        selection.ignored,
        None if touched is None else len(touched),
        0 if touched is None or plan.rewritten is None else len(touched) - len(plan.rewritten["items"]),
        plan.oldest_change,
    )


def _new_watermarks(run: RunContext, plan: RunPlan) -> dict[str, str]:
    """The watermarks after the run: the objects' names say how far each shard got; objects whose
    names say nothing are read for their highest sequence number per shard."""
    marks = dict(run.marks)
    for shard, mark in name_watermarks(run.selection).items():
        if mark > marks.get(shard, ""):
            marks[shard] = mark
    if run.selection.unconventional and plan.parsed is not None:
        parsed = plan.parsed
        rows = reading(
            lambda: (
                parse.valid_changes(parsed, run.keys)
                .groupBy(SHARD_ID)
                .agg(F.max(SEQUENCE).alias("m"))
                .collect()
            )
        )
        for row in rows:
            if row["m"] > marks.get(row[SHARD_ID], ""):
                marks[row[SHARD_ID]] = row["m"]
    return marks


def _unmoved(tables: SnapshotTables, read_at: dict[str, int | None]) -> bool:
    try:
        return tables.snapshot_ids() == read_at
    except Exception:  # the catalog itself is what failed: keep the files
        return False

"""The bootstrap job: a table's export (or a scan of it) becomes the snapshot's base, then a full
snapshot run merges the change log on top (:mod:`pipeline.bootstrap` reads the export and scans).

The base is committed by :func:`pipeline.base_commit.commit_base` (as a reload's is).
"""

from __future__ import annotations

import time

from pyspark.sql import SparkSession

from ground.settings import Settings
from pipeline import bootstrap
from pipeline.base_commit import commit_base
from pipeline.log_lines import Progress, quiet
from pipeline.schemas import KeySchema
from pipeline.snapshot_run import SnapshotResult, run_snapshot, snapshot_tables
from pipeline.storage import Store, spark_uri, store_for
from pipeline.table import DEFAULT_BUCKETS, SnapshotTables


def run_bootstrap(
    spark: SparkSession,
    settings: Settings,
    *,
    export_uri: str | None = None,
    segments: int = 4,
    store: Store | None = None,
    progress: Progress = quiet,
    tables: SnapshotTables | None = None,
    buckets: int = DEFAULT_BUCKETS,
    now: float | None = None,
) -> SnapshotResult:
    """The first snapshot of a table with data: its export (``export_uri``, no older than the
    stream's retention at ``now``) or a parallel scan of ``segments`` segments becomes the base; then
    a full snapshot run merges the change log on top."""
    keys = KeySchema.of(settings.table)
    tables = tables or snapshot_tables(settings)
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
    items = commit_base(spark, settings, rows, start_time, store=store, tables=tables, buckets=buckets)
    progress(
        f"[bootstrap] base of {items} item(s) committed to {tables.base_name}; "
        f"changes created before {start_time:.3f} are in it"
    )
    return run_snapshot(spark, settings, full=True, store=store, progress=progress, tables=tables)

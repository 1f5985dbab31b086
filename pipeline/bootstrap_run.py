"""The bootstrap job: a table's export (or a scan of it) becomes the snapshot's base, then a full
snapshot run merges the change log on top (:mod:`pipeline.bootstrap` reads the export and scans).

The base's rows are kept (in memory, spilling to disk) while the job samples their keys for the
tables' key ranges (:mod:`pipeline.ranges`: the base holds most of the table's keys, so its sample
lays the table out better than the change log's would) and counts them, then written once.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid

from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from ground.settings import Settings
from pipeline import bootstrap, ranges, snapshot
from pipeline.log_lines import Progress, quiet, reading
from pipeline.run_plan import with_bucket
from pipeline.schemas import KeySchema
from pipeline.snapshot_run import SnapshotResult, run_snapshot, snapshot_tables
from pipeline.storage import Store, spark_uri, store_for
from pipeline.table import DEFAULT_BUCKETS, SnapshotTables, as_file_uri

SAMPLED_KEYS = 200_000  # keys of the base sampled for its ranges


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
    kept = rows.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        totals = reading(
            lambda: kept.agg(
                F.count(F.lit(1)).alias("items"),
                F.count_if(F.greatest(*[F.col(n).isNull() for n in keys.names])).alias("keyless"),
            ).first()
        )
        items = int(totals["items"]) if totals is not None else 0
        if totals is not None and int(totals["keyless"]):
            raise bootstrap.BootstrapError(
                f"{totals['keyless']} item(s) lack the table's key attributes {keys.names}: "
                "is this the table's export?"
            )
        fraction = min(1.0, SAMPLED_KEYS / max(items, 1))
        sample = kept.select(*keys.names).sample(fraction=fraction, seed=7).collect()
        layout = ranges.choose([tuple(row) for row in sample], count)
        base = with_bucket(kept, keys, layout or ranges.KeyRanges(()))
        reading(lambda: snapshot.write_parts(base, out, keys))
        files = [as_file_uri(f) for f in out_store.list_files(out) if f.endswith(".parquet")]
        tables.commit_base(files, start_time, layout)
    except BaseException:
        out_store.remove_tree(out)
        raise
    finally:
        kept.unpersist()
    progress(
        f"[bootstrap] base of {items} item(s) committed to {tables.base_name}; "
        f"changes created before {start_time:.3f} are in it"
    )
    return run_snapshot(spark, settings, full=True, store=store, progress=progress, tables=tables)

"""The two jobs that only read: ``stats`` (the change log's figures, as Parquet and a chart) and
``verify`` (the snapshot against a consistent scan of the live table)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from ground.settings import Settings
from pipeline import chart, compare, parse, snapshot, stats
from pipeline.changelog import select_objects
from pipeline.errors import PipelineError
from pipeline.log_lines import Progress, parse_checked, quiet, reading
from pipeline.schemas import ITEM_COLUMN, KeySchema
from pipeline.snapshot_run import read_snapshot
from pipeline.storage import Store, join, spark_uri, store_for
from pipeline.table_scan import scan_items


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
    progress: Progress = quiet,
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
    log = parse_checked(spark, [o.uri for o in selection.to_read], keys, tolerate, progress)
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
    reading(lambda: frame.write.mode("overwrite").parquet(uri))


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
    progress: Progress = quiet,
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

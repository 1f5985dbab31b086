"""Entry points of the pipeline: the only code that reads and writes.

Runs locally through ``consumer pipeline snapshot|stats|verify --env X`` and on a cluster through
``spark-submit pipeline/jobs.py snapshot|stats|verify --env X`` (or ``python -m pipeline.jobs``);
both call :func:`run_snapshot`, :func:`run_stats` and :func:`run_verify`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from consumer.settings import Settings
from pipeline import chart, compare, parse, snapshot, stats
from pipeline.changelog import select_objects
from pipeline.errors import BadChangeLogError, PipelineError
from pipeline.schemas import EVENT, ITEM_COLUMN, KeySchema, snapshot_schema
from pipeline.storage import Store, join, spark_uri, store_for
from pipeline.table_scan import scan_items
from pipeline.versions import Manifest, SnapshotCatalog

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
        if bad:
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
            progress(
                f"warning: {report}\n  tolerated ({bad} <= {tolerate}); these lines are not in the result"
            )
    except BaseException:
        parsed.unpersist()
        raise
    return ParsedLog(parsed, raw, lines, bad)


# ----------------------------------------------------------------------------------- snapshot


@dataclass(frozen=True)
class SnapshotResult:
    version: str | None  # the version the pointer names after the run
    up_to_date: bool  # True: nothing new, no version written
    objects_read: int = 0
    objects_already_merged: int = 0
    lines: int = 0
    bad_lines: int = 0
    new_changes: int = 0
    items: int = 0
    tombstones: int = 0
    ignored_files: tuple[str, ...] = field(default_factory=tuple)


def read_snapshot(spark: SparkSession, settings: Settings, store: Store | None = None) -> DataFrame:
    """The current snapshot's items (what the pointer names); an error before the first run."""
    keys = KeySchema.of(settings.table)
    catalog = SnapshotCatalog(
        store or store_for(settings.pipeline.snapshot_uri, spark), settings.pipeline.snapshot_uri
    )
    current = catalog.current()
    if current is None:
        raise PipelineError(
            f"no snapshot at {settings.pipeline.snapshot_uri} yet: run `consumer pipeline snapshot` first"
        )
    return spark.read.schema(snapshot_schema(keys)).parquet(spark_uri(catalog.items_uri(current.version)))


def run_snapshot(
    spark: SparkSession,
    settings: Settings,
    *,
    full: bool = False,
    tolerate_bad_lines: int | None = None,
    store: Store | None = None,
    progress: Progress = _quiet,
) -> SnapshotResult:
    """Merge the changes after the current version's watermarks into a new version, then switch to it.

    ``full`` ignores the previous version and rebuilds from the whole change log (same result).
    """
    config = settings.pipeline
    keys = KeySchema.of(settings.table)
    tolerate = config.tolerate_bad_lines if tolerate_bad_lines is None else tolerate_bad_lines
    snapshot_store = store or store_for(config.snapshot_uri, spark)
    log_store = store or store_for(config.changelog_uri, spark)
    catalog = SnapshotCatalog(snapshot_store, config.snapshot_uri)
    pointed = catalog.current()
    current = None if full else pointed  # --full: start from nothing, but still number after the pointer
    marks = current.watermarks if current else {}

    selection = select_objects(log_store.list_files(config.changelog_uri), marks)
    progress(
        f"[1/4] change log {config.changelog_uri}: {len(selection.to_read)} object(s) to read, "
        f"{selection.already_merged} already merged"
        + (f", {len(selection.ignored)} other file(s) ignored" if selection.ignored else "")
    )
    if not selection.to_read and current is not None:
        progress(f"[4/4] snapshot version {current.version} is up to date; nothing written")
        return SnapshotResult(
            current.version, True, 0, selection.already_merged, ignored_files=selection.ignored
        )

    schema = snapshot_schema(keys)
    previous_watermarks = spark.createDataFrame(
        [(shard, seq) for shard, seq in sorted(marks.items())], snapshot.WATERMARKS
    )
    if selection.to_read:
        log = _parse_checked(spark, [o.uri for o in selection.to_read], keys, tolerate, progress)
        lines, bad = log.lines, log.bad
        # Not deduplicated: copies of a change are the same change, and the merge picks one of them.
        changes = snapshot.after_watermarks(parse.valid_changes(log.parsed, keys), previous_watermarks)
        cached = log.parsed
    else:
        lines = bad = 0
        changes = cached = spark.createDataFrame([], schema)
    try:
        marks_rows = _reading(
            lambda: (
                snapshot.shard_watermarks(changes, previous_watermarks)
                .join(snapshot.distinct_per_shard(changes), "shard_id", "left")
                .collect()
            )
        )
        new_changes = sum(int(row["count"] or 0) for row in marks_rows)
        progress(f"[2/4] parsed {lines} line(s): {new_changes} new change(s), {bad} malformed")

        version = catalog.next_version(pointed)
        if current is not None:
            previous = spark.read.schema(schema).parquet(
                spark_uri(catalog.items_uri(current.version)),
                spark_uri(catalog.tombstones_uri(current.version)),
            )
        else:
            previous = spark.createDataFrame([], schema)
        state = snapshot.latest_state(previous, changes, keys).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            by_event = {row[EVENT]: int(row["count"]) for row in state.groupBy(EVENT).count().collect()}
            removed = by_event.get("REMOVE", 0)
            items = sum(by_event.values()) - removed
            progress(f"[3/4] merged: {items} item(s), {removed} tombstone(s); writing version {version}")
            snapshot.visible_items(state).write.mode("overwrite").parquet(
                spark_uri(catalog.items_uri(version))
            )
            snapshot.tombstones(state).write.mode("overwrite").parquet(
                spark_uri(catalog.tombstones_uri(version))
            )
        finally:
            state.unpersist()
    finally:
        cached.unpersist()

    manifest = Manifest(
        version=version,
        watermarks={str(row["shard_id"]): str(row["sequence_number"]) for row in marks_rows},
        counts={
            "objects_read": len(selection.to_read),
            "lines": lines,
            "bad_lines": bad,
            "new_changes": new_changes,
            "items": items,
            "tombstones": removed,
        },
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    catalog.commit(manifest)
    progress(f"[4/4] pointer {join(config.snapshot_uri, 'CURRENT')} -> version {version} ({items} items)")
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
    )


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
    parser.add_argument("job", choices=("snapshot", "stats", "verify"))
    parser.add_argument("--env", default="local", help="environment: config/<env>.yaml (default: local)")
    parser.add_argument("--config-dir", default=None, help="configuration directory (default: ./config)")
    parser.add_argument("--master", default=None, help="Spark master (default: the submitter's)")
    parser.add_argument("--full", action="store_true", help="snapshot: rebuild from the whole change log")
    parser.add_argument(
        "--tolerate-bad-lines", type=int, default=None, help="override pipeline.tolerate_bad_lines"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show Spark's own warnings and log4j banners"
    )
    return parser


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
    from consumer.settings import ConfigError, load_settings

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

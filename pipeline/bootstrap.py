"""The first snapshot of a table that already holds data: from a DynamoDB export to S3, or a scan.

A stream keeps 24 hours, so a table older than that cannot be rebuilt from its change log alone.
Bootstrap reads the table's state as of a point in time ``T`` and keeps it as the snapshot's *base*
(the ``<table>_base`` Iceberg table); every snapshot run then merges the change log on top of it,
applying only changes created at or after ``T`` (``consumer.start_time``):

* **export** — a DynamoDB export to S3 in ``DYNAMODB_JSON`` format (``manifest-summary.json``,
  ``manifest-files.json``, ``data/*.json.gz`` with one ``{"Item": {...}}`` per line), read by Spark
  with an explicit schema; ``T`` is the export's ``exportTime`` (its point in time). A change created
  before ``T`` is in the export already and never wins over it; a change at or after ``T`` wins
  (re-applying one the export already holds is harmless: the item's later changes are applied too).
* **scan** — where no export exists (locally, small tables): a parallel ``Scan`` (one segment per
  Spark task); ``T`` is the time the scan *started*, so every change the scan may or may not have
  seen is applied on top of it, in sequence order. This needs the change log to hold every change
  from ``T`` on — start the fleet (reading from TRIM_HORIZON or earlier than ``T``) before the scan.

An export older than the stream's retention (24 h) is refused (:func:`check_export_age`): the
stream no longer holds the changes made between ``T`` and 24 h ago, so a log started now could not
cover them. The way out is an export taken while the fleet runs, or a scan.

Rows of the base look like changes: ``_shard_id`` ``export`` / ``scan``, sequence number zero, event
INSERT, creation time ``T``.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from ground.settings import STREAM_RETENTION_HOURS
from pipeline import compare, parse
from pipeline.errors import PipelineError
from pipeline.schemas import (
    CREATED,
    EVENT,
    ITEM_COLUMN,
    LANDED,
    SEQUENCE,
    SEQUENCE_DIGITS,
    SHARD_ID,
    WIRE_ITEM,
    KeySchema,
    snapshot_schema,
)
from pipeline.storage import Store, join

EXPORT_LINE = T.StructType([T.StructField("Item", WIRE_ITEM)])
_KEY_FIELD = {"S": "S", "N": "N", "B": "B"}


class BootstrapError(PipelineError):
    """The export cannot be used, or the table cannot be scanned."""


class ExportTooOldError(BootstrapError):
    """An export older than the stream's retention: changes between it and the stream are lost."""


@dataclass(frozen=True)
class ExportManifest:
    export_time: float  # epoch seconds
    data_files: tuple[str, ...]
    item_count: int | None


def _epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def read_export_manifest(store: Store, export_uri: str) -> ExportManifest:
    """``manifest-summary.json`` (format, time, count) and ``manifest-files.json`` (data files)."""
    root = export_uri.rstrip("/")
    summary_text = store.read_text(join(root, "manifest-summary.json"))
    if summary_text is None:
        raise BootstrapError(f"{root}: no manifest-summary.json (expected a DynamoDB export's folder)")
    try:
        summary: dict[str, Any] = json.loads(summary_text)
        export_format = summary.get("exportFormat", "DYNAMODB_JSON")
        export_time = _epoch(str(summary["exportTime"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise BootstrapError(f"{root}/manifest-summary.json: {exc}") from exc
    if export_format != "DYNAMODB_JSON":
        raise BootstrapError(f"{root}: export format {export_format}; bootstrap reads DYNAMODB_JSON exports")
    if summary.get("exportType", "FULL_EXPORT") != "FULL_EXPORT":
        raise BootstrapError(f"{root}: an {summary['exportType']}; bootstrap needs a FULL_EXPORT")
    files_text = store.read_text(join(root, "manifest-files.json"))
    if files_text is None:
        raise BootstrapError(f"{root}: no manifest-files.json")
    data: list[str] = []
    for number, line in enumerate(files_text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            key = str(json.loads(line)["dataFileS3Key"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BootstrapError(f"{root}/manifest-files.json:{number}: {exc}") from exc
        # Keys are the bucket's (…/AWSDynamoDB/<export id>/data/<name>.json.gz): the file sits in
        # the export folder's data/ whatever the bucket or prefix it was copied to.
        data.append(join(root, "data", key.rsplit("/", 1)[-1]))
    count = summary.get("itemCount")
    return ExportManifest(export_time, tuple(data), None if count is None else int(count))


def check_export_age(
    manifest: ExportManifest,
    export_uri: str,
    *,
    now: float,
    retention_hours: float = STREAM_RETENTION_HOURS,
) -> None:
    """Refuse an export taken longer ago than the stream keeps changes, saying what to do instead.

    The snapshot is the export plus every change from its ``exportTime`` on; the stream holds the
    last ``retention_hours`` only, so from an older export the changes between it and the oldest
    record still in the stream would be missing, silently.
    """
    age_hours = (now - manifest.export_time) / 3600
    if age_hours <= retention_hours:
        return
    taken = dt.datetime.fromtimestamp(manifest.export_time, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    raise ExportTooOldError(
        f"{export_uri.rstrip('/')}: the export is from {taken}, {age_hours:.0f} h ago; the stream keeps "
        f"{retention_hours:g} h, so the changes made from {taken} until {age_hours - retention_hours:.0f} h "
        "ago are neither in the export nor still in the stream, and the snapshot would miss them. Take a new "
        "export while the fleet runs (`aws dynamodb export-table-to-point-in-time --export-format "
        "DYNAMODB_JSON ...`) and bootstrap from it, or bootstrap from a scan (leave out --export)"
    )


def _base_columns(keys: KeySchema, item: Any, source: str, start_time: float) -> list[Any]:
    schema = snapshot_schema(keys)
    columns = {
        **{a.name: item[a.name][_KEY_FIELD[a.type]] for a in keys.attributes},
        ITEM_COLUMN: parse.typed_item(item),
        SHARD_ID: F.lit(source),
        SEQUENCE: F.lit("0" * SEQUENCE_DIGITS),
        EVENT: F.lit("INSERT"),
        CREATED: F.lit(start_time),
        LANDED: F.lit(None).cast("double"),
    }
    return [columns[f.name].cast(f.dataType).alias(f.name) for f in schema.fields]


def export_rows(spark: SparkSession, manifest: ExportManifest, keys: KeySchema, spark_uri: Any) -> DataFrame:
    """The export's items as snapshot rows (read by Spark with an explicit schema)."""
    if not manifest.data_files:
        return spark.createDataFrame([], snapshot_schema(keys))
    lines = spark.read.schema(EXPORT_LINE).json([spark_uri(f) for f in manifest.data_files])
    return lines.select(*_base_columns(keys, F.col("Item"), "export", manifest.export_time))


def check_keys(rows: DataFrame, keys: KeySchema) -> None:
    """Every base row has the table's key attributes (else the export is of another table)."""
    missing = rows.filter(any_key_missing(keys)).count()
    if missing:
        raise BootstrapError(
            f"{missing} item(s) lack the table's key attributes {keys.names}: is this the table's export?"
        )


def _scan_segment(
    settings: dict[str, Any], segment: int, segments: int
) -> Iterator[dict[str, Any]]:  # runs on an executor
    import boto3

    client = boto3.client("dynamodb", region_name=settings["region"], endpoint_url=settings["endpoint_url"])
    pages = client.get_paginator("scan").paginate(
        TableName=settings["table"], ConsistentRead=True, Segment=segment, TotalSegments=segments
    )
    for page in pages:
        yield from page.get("Items", [])


def scan_rows(
    spark: SparkSession,
    keys: KeySchema,
    *,
    table: str,
    region: str | None,
    endpoint_url: str | None,
    segments: int,
    start_time: float,
) -> DataFrame:
    """A parallel scan of the table (one segment per task) as snapshot rows."""
    where = {"table": table, "region": region, "endpoint_url": endpoint_url}
    schema = snapshot_schema(keys)
    names = schema.fieldNames()

    def rows(parts: Iterable[int]) -> Iterator[tuple[Any, ...]]:
        for segment in parts:
            for found in _scan_segment(where, segment, segments):
                row = compare.table_row(found, keys)
                row.update({SHARD_ID: "scan", SEQUENCE: "0" * SEQUENCE_DIGITS, EVENT: "INSERT"})
                row.update({CREATED: start_time, LANDED: None})
                yield tuple(row[n] for n in names)

    segments_rdd = spark.sparkContext.parallelize(range(segments), segments)
    return spark.createDataFrame(segments_rdd.mapPartitions(rows), schema)


def scan_start() -> float:
    return time.time()


def any_key_missing(keys: KeySchema) -> Column:
    """True where a key attribute is null (``greatest`` needs two columns: a table may have one key)."""
    missing = F.lit(False)
    for name in keys.names:
        missing = missing | F.col(name).isNull()
    return missing

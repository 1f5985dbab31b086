"""A reload in the change log becomes the snapshot's new base: the repair of a trimmed gap.

With ``worker.on_trimmed: reload`` a worker that finds a shard's data trimmed re-delivers the whole
table from a Scan (docs/processing.md); the change-log sink lands it under
``<changelog>/_reloads/<reload id>/``: ``start.json``, one ``<first>-<last>.jsonl.gz`` per page
(re-loaded records, numbered from 1), and ``end.json`` (``reloadStartedAt`` ``T``,
``recordsReloaded``) once every page is landed.

A reload with its ``end.json`` is the table's state at or after ``T``, as a scan bootstrap is
(pipeline/bootstrap.py): every change created before ``T`` is in it or superseded by it, and every
change it may have missed is created at or after ``T``, so it is in the stream, which the workers
read on. So the latest complete reload newer than the snapshot's base is taken as the new base, and
the next run is a full one: the base plus every change created at or after ``T`` — exactly what a
scan bootstrap at ``T`` gives. Items deleted during the gap (which no scan can show, and whose REMOVE
was trimmed) are not in the base and have no change after ``T``: they are gone from the snapshot.

A reload without ``end.json`` (its worker stopped mid-way; a later one reloads again) is never used,
nor one whose pages hold fewer records than its ``end.json`` counts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline import parse
from pipeline.changelog import RELOADS
from pipeline.errors import PipelineError
from pipeline.log_lines import read_lines
from pipeline.schemas import (
    CREATED,
    EVENT,
    ITEM_COLUMN,
    LANDED,
    SEQUENCE,
    SEQUENCE_DIGITS,
    SHARD_ID,
    KeySchema,
    snapshot_schema,
)
from pipeline.storage import Store


class ReloadIncompleteError(PipelineError):
    """A reload's end.json counts more records than its pages hold: the change log lost pages."""


@dataclass(frozen=True)
class Reload:
    reload_id: str
    started_at: float  # epoch seconds: the table's state at or after this
    records: int
    shard_id: str
    pages: tuple[str, ...]


def is_reload_object(uri: str) -> bool:
    return f"/{RELOADS}/" in uri


def complete_reloads(store: Store, files: Sequence[str]) -> list[Reload]:
    """The reloads in a listing of ``<changelog>/_reloads/`` that have their ``end.json``, oldest
    first (a listing of the change log itself leaves ``_`` folders out, as temporary files)."""
    folders: dict[str, list[str]] = {}
    for uri in files:
        if is_reload_object(uri):
            folder, _, _ = uri.rpartition("/")
            folders.setdefault(folder, []).append(uri)
    found: list[Reload] = []
    for folder, uris in folders.items():
        end = f"{folder}/end.json"
        if end not in uris:
            continue
        text = store.read_text(end)
        if text is None:
            continue
        try:
            marker = json.loads(text)
            reload = Reload(
                str(marker["reloadId"]),
                float(marker["reloadStartedAt"]),
                int(marker["recordsReloaded"]),
                str(marker["shardId"]),
                tuple(sorted(u for u in uris if u.endswith(".jsonl.gz"))),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise PipelineError(f"{end}: not a reload's end marker: {exc}") from exc
        found.append(reload)
    return sorted(found, key=lambda r: r.started_at)


def newer_reload(store: Store, files: Sequence[str], base_time: float | None) -> Reload | None:
    """The latest complete reload, if it is newer than the snapshot's base (``base_time``)."""
    reloads = complete_reloads(store, files)
    if not reloads:
        return None
    latest = reloads[-1]
    if base_time is not None and latest.started_at <= base_time:
        return None
    return latest


def reload_rows(spark: SparkSession, reload: Reload, keys: KeySchema) -> DataFrame:
    """The reload's items as base rows (as a scan bootstrap's: sequence number zero, created at
    ``T``); refuses a reload whose pages hold fewer distinct records than its end marker says."""
    schema = snapshot_schema(keys)
    if not reload.pages:
        if reload.records:
            raise ReloadIncompleteError(
                f"reload {reload.reload_id}: no pages, {reload.records} records counted"
            )
        return spark.createDataFrame([], schema)
    changes = parse.valid_changes(parse.parse_lines(read_lines(spark, list(reload.pages)), keys), keys)
    distinct = changes.dropDuplicates([SEQUENCE]).persist()
    held = distinct.count()
    if held != reload.records:
        distinct.unpersist()
        raise ReloadIncompleteError(
            f"reload {reload.reload_id}: its pages hold {held} record(s), its end.json counts {reload.records}"
        )
    rows = distinct.select(
        *[F.col(name) for name in keys.names],
        F.col(ITEM_COLUMN),
        F.lit("reload").alias(SHARD_ID),
        F.lit("0" * SEQUENCE_DIGITS).alias(SEQUENCE),
        F.lit("INSERT").alias(EVENT),
        F.lit(reload.started_at).alias(CREATED),
        F.lit(None).cast("double").alias(LANDED),
    )
    return rows.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields])

"""Changes → the current state of every item: pure transforms of the snapshot job.

The *state* keeps, per item key, its latest change — including REMOVEs, as tombstones. Readers see
only :func:`visible_items`; the tombstones stay so that a change arriving late with a lower sequence
number (a parent shard's object landing after its child's) can never resurrect a removed item.

Order: per key, by sequence number (40-digit zero-padded strings compare as the integers do;
children's numbers are above their parents', so this is lineage order), then shard id as a
deterministic tie-break. The same change seen twice (a replayed object, or two objects holding the same
shard id + sequence number) is one change.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline.schemas import EVENT, LANDED, SEQUENCE, SHARD_ID, KeySchema, snapshot_schema
from pipeline.table import BUCKET

WATERMARKS = T.StructType(
    [
        T.StructField("shard_id", T.StringType(), nullable=False),
        T.StructField("sequence_number", T.StringType(), nullable=False),
    ]
)


def deduplicate(changes: DataFrame) -> DataFrame:
    """One row per (shard id, sequence number): replays and copies count once."""
    return changes.dropDuplicates([SHARD_ID, SEQUENCE])


def after_watermarks(changes: DataFrame, watermarks: DataFrame) -> DataFrame:
    """Changes above their shard's watermark (:data:`WATERMARKS`); shards without one pass whole."""
    marks = watermarks.select(F.col("shard_id").alias("_wm_shard"), F.col("sequence_number").alias("_wm_seq"))
    joined = changes.join(F.broadcast(marks), changes[SHARD_ID] == marks["_wm_shard"], "left")
    kept = joined.filter(F.col("_wm_seq").isNull() | (F.col(SEQUENCE) > F.col("_wm_seq")))
    return kept.drop("_wm_shard", "_wm_seq")


NEW = "_new"  # true on this run's changes, false on rows of the previous state
CHANGES = "_changes"  # distinct new changes (shard id + sequence number) merged into the row


def latest_state(previous: DataFrame, changes: DataFrame, keys: KeySchema) -> DataFrame:
    """Merge a previous state (items and tombstones) with new changes: the latest change per key wins."""
    schema = snapshot_schema(keys)
    names = schema.fieldNames()
    rest = [name for name in names if name not in keys.names]
    both = previous.select(*names).unionByName(changes.select(*names))
    # Copies of one change differ at most in landing time: the latest landing wins, deterministically.
    order = F.struct(F.col(SEQUENCE), F.col(SHARD_ID), F.coalesce(F.col(LANDED), F.lit(0.0)))
    latest = both.groupBy(*keys.names).agg(F.max_by(F.struct(*rest), order).alias("_latest"))
    return latest.select(*keys.names, *[F.col("_latest")[name].alias(name) for name in rest])


def _latest_per_key(rows: DataFrame, keys: KeySchema, group: list[str]) -> DataFrame:
    """Per key, the latest row (by sequence number, shard id, landing time) and the number of
    distinct new changes among the key's rows. ``rows`` carry :data:`NEW`."""
    names = [f for f in rows.columns if f != NEW]
    rest = [name for name in names if name not in group]
    order = F.struct(F.col(SEQUENCE), F.col(SHARD_ID), F.coalesce(F.col(LANDED), F.lit(0.0)))
    change_id = F.when(F.col(NEW), F.struct(F.col(SHARD_ID), F.col(SEQUENCE)))
    latest = rows.groupBy(*group).agg(
        F.max_by(F.struct(*rest), order).alias("_latest"),
        F.size(F.collect_set(change_id)).alias(CHANGES),
    )
    return latest.select(*group, *[F.col("_latest")[name].alias(name) for name in rest], CHANGES)


def _tasks(frame: DataFrame, buckets: int) -> int:
    """Shuffle partitions for ``buckets`` buckets: at most one per bucket, two per core."""
    return max(1, min(buckets, frame.sparkSession.sparkContext.defaultParallelism * 2))


def rebuild(changes: DataFrame, keys: KeySchema, base: DataFrame | None = None) -> DataFrame:
    """Every bucket from scratch: the latest change per key over ``changes`` (and a bootstrap's
    ``base`` state). Grouped by bucket and key: one shuffle, after a partial aggregation per task
    (a repartition by bucket first would keep one file per bucket but forgo that)."""
    rows = changes
    if base is not None:
        rows = base.select(*[c for c in changes.columns if c != NEW]).withColumn(NEW, F.lit(False))
        rows = rows.unionByName(changes)
    return _latest_per_key(rows, keys, [BUCKET, *keys.names])


def merge_into(previous: DataFrame, changes: DataFrame, keys: KeySchema, buckets: int) -> DataFrame:
    """The new state of the buckets ``previous`` holds (all their rows, items and tombstones) after
    ``changes`` (each marked :data:`NEW`, all in those buckets).

    Rows whose key no change touches pass through as they are — no aggregation, one broadcast
    anti-join against the changed keys; only the changed keys are aggregated (their previous row
    against their new changes). The result is then spread by bucket, one task per bucket, so that a
    bucket stays one file run after run.
    """
    changed = F.broadcast(changes.select(*keys.names).distinct())
    untouched = previous.join(changed, keys.names, "left_anti").withColumn(CHANGES, F.lit(0))
    contested = previous.join(changed, keys.names, "left_semi").withColumn(NEW, F.lit(False))
    latest = _latest_per_key(contested.unionByName(changes), keys, [BUCKET, *keys.names])
    merged = untouched.unionByName(latest.select(*untouched.columns))
    return merged.repartition(_tasks(previous, buckets), BUCKET)


def write_parts(state: DataFrame, uri: str) -> None:
    """Write a merged state as Parquet: ``kind=items`` / ``kind=tombstones``, then ``b=<bucket>``
    (the bucket stays a column of the files too: the tables' partition values are read from it)."""
    kind = F.when(F.col(EVENT) == "REMOVE", F.lit("tombstones")).otherwise(F.lit("items"))
    out = state.drop(CHANGES).withColumn("kind", kind).withColumn("b", F.col(BUCKET))
    out.write.mode("overwrite").partitionBy("kind", "b").parquet(uri)


def visible_items(state: DataFrame) -> DataFrame:
    """What the table holds: keys whose latest change is not a REMOVE."""
    return state.filter(F.col(EVENT) != "REMOVE")


def tombstones(state: DataFrame) -> DataFrame:
    """Keys whose latest change is a REMOVE (kept to order late arrivals correctly)."""
    return state.filter(F.col(EVENT) == "REMOVE")


def shard_watermarks(changes: DataFrame, previous: DataFrame) -> DataFrame:
    """Highest sequence number included per shard, across the previous run and this one."""
    current = changes.groupBy(F.col(SHARD_ID).alias("shard_id")).agg(F.max(SEQUENCE).alias("sequence_number"))
    merged = previous.select("shard_id", "sequence_number").unionByName(current)
    return merged.groupBy("shard_id").agg(F.max("sequence_number").alias("sequence_number"))


def distinct_per_shard(changes: DataFrame) -> DataFrame:
    """``shard_id``, ``count``: distinct changes (sequence numbers) per shard, copies counted once."""
    return changes.groupBy(F.col(SHARD_ID).alias("shard_id")).agg(F.count_distinct(SEQUENCE).alias("count"))

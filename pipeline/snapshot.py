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

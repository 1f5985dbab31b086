"""Change statistics: pure transforms over deduplicated changes (:func:`pipeline.schemas.change_schema`)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline.schemas import (
    CHANGES_PER_MINUTE,
    CREATED,
    EVENT,
    ITEMS_PER_SHARD,
    LAG_PERCENTILES,
    LANDED,
    SHARD_ID,
    KeySchema,
)


def _conform(frame: DataFrame, names: list[str]) -> DataFrame:
    return frame.select(*names)


def changes_per_minute(changes: DataFrame) -> DataFrame:
    """:data:`CHANGES_PER_MINUTE`: changes per minute of ApproximateCreationDateTime, by event type."""
    minute = F.date_trunc("minute", F.timestamp_seconds(F.col(CREATED)))
    counted = (
        changes.filter(F.col(CREATED).isNotNull())
        .groupBy(minute.alias("minute"), F.col(EVENT).alias("event_name"))
        .agg(F.count(F.lit(1)).alias("changes"))
    )
    return _conform(counted, CHANGES_PER_MINUTE.fieldNames()).orderBy("minute", "event_name")


def lag_percentiles(changes: DataFrame) -> DataFrame:
    """:data:`LAG_PERCENTILES`: end-to-end lag, landing time − ApproximateCreationDateTime, in seconds.

    Exact percentiles (``percentile``), not approximations: the input is one row per change and the
    figure is the one an operator quotes.
    """
    lag = F.col(LANDED) - F.col(CREATED)
    timed = changes.filter(F.col(LANDED).isNotNull() & F.col(CREATED).isNotNull()).select(lag.alias("lag"))
    summary = timed.agg(
        F.count(F.lit(1)).alias("changes"),
        F.percentile("lag", 0.5).alias("p50_seconds"),
        F.percentile("lag", 0.9).alias("p90_seconds"),
        F.percentile("lag", 0.99).alias("p99_seconds"),
        F.max("lag").alias("max_seconds"),
    )
    return _conform(summary, LAG_PERCENTILES.fieldNames())


def items_per_shard(changes: DataFrame, keys: KeySchema) -> DataFrame:
    """:data:`ITEMS_PER_SHARD`: distinct items and changes seen on each shard."""
    item = F.struct(*keys.names)
    counted = changes.groupBy(F.col(SHARD_ID).alias("shard_id")).agg(
        F.count_distinct(item).alias("items"), F.count(F.lit(1)).alias("changes")
    )
    return _conform(counted, ITEMS_PER_SHARD.fieldNames()).orderBy("shard_id")

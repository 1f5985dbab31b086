"""The stats job: per-minute counts, lag percentiles, items per shard, the chart."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline.reports import run_stats
from pipeline.schemas import CHANGES_PER_MINUTE, ITEMS_PER_SHARD
from tests.pipeline.fixtures import T0, change, settings_for, write_object
from tests.pipeline.frames import assert_frames_equal

pytestmark = pytest.mark.spark
P, C = "shardId-1-parent", "shardId-2-child"


def test_stats_counts_lags_and_chart(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    batch = [
        change(P, 1, "INSERT", "a", created=T0, landed=T0 + 1),
        change(P, 2, "INSERT", "b", created=T0 + 10, landed=T0 + 12),
        change(P, 3, "MODIFY", "a", created=T0 + 70, landed=T0 + 73),
    ]
    write_object(log, batch)
    write_object(log, batch)  # replay: same object, counted once
    write_object(log, [change(C, 10, "REMOVE", "a", parents=[P], created=T0 + 75, landed=T0 + 79)])

    result = run_stats(spark, settings)

    assert (result.changes, result.minutes, result.shards) == (4, 2, 2)
    assert result.lag["max_seconds"] == 4.0
    assert result.lag["p50_seconds"] == 2.5  # exact percentile of 1, 2, 3, 4
    read = spark.read.parquet
    minute0 = datetime.utcfromtimestamp(T0)
    minute1 = datetime.utcfromtimestamp(T0 + 60)
    assert_frames_equal(
        read(str(tmp_path / "stats" / "changes_per_minute")),
        spark.createDataFrame(
            [(minute0, "INSERT", 2), (minute1, "MODIFY", 1), (minute1, "REMOVE", 1)], CHANGES_PER_MINUTE
        ),
        ignoreNullable=True,
    )
    assert_frames_equal(
        read(str(tmp_path / "stats" / "items_per_shard")),
        spark.createDataFrame([(P, 2, 3), (C, 1, 1)], ITEMS_PER_SHARD),
        ignoreNullable=True,
    )
    png = tmp_path / "stats" / "changes.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert T.TimestampType() == read(str(tmp_path / "stats" / "changes_per_minute")).schema["minute"].dataType

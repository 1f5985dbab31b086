"""A reload the workers landed in the change log repairs the snapshot: it becomes the base, items
deleted during the gap go, older changes of lagging shards do not win over it, later ones do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from consumer.processing.api import Batch
from consumer.processing.gap import GapEvent, reloaded_record
from consumer.records import ShardInfo
from consumer.sinks.changelog import ChangelogSink, ChangelogStore
from pipeline.reloads import ReloadIncompleteError
from pipeline.reports import run_verify
from pipeline.snapshot_run import run_snapshot, snapshot_tables
from tests.pipeline.fixtures import T0, change, settings_for, write_object

pytestmark = pytest.mark.spark
P, Q = "shardId-00000001", "shardId-00000002"
T = T0 + 100  # the reload's start
SHARD = ShardInfo(P)


def item(pk: str, v: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "a"}, "v": {"S": v}}


def land_reload(root: Path, items: list[dict[str, Any]], *, counted: int | None = None) -> None:
    """What the changelog sink lands for a reload: start.json, pages of two, end.json."""
    gap = GapEvent(SHARD, "gap", "000000000000000000003", None, None, None, "r1", T)
    sink = ChangelogSink(ChangelogStore(str(root)), "orders")
    sink(Batch(SHARD, (), gap=gap))
    records = [reloaded_record(i, key_names=("pk", "sk"), number=n, gap=gap) for n, i in enumerate(items, 1)]
    for first in range(0, len(records), 2):
        sink(Batch(SHARD, tuple(records[first : first + 2]), reload=gap))
    sink(Batch(SHARD, (), gap=gap.finished(len(records) if counted is None else counted)))


def test_a_complete_reload_becomes_the_base_and_the_snapshot_equals_the_table(
    spark: SparkSession, tmp_path: Path, dynamodb: Any
) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(
        log,
        [
            change(P, 1, "INSERT", "kept", image={"v": {"S": "0"}}),
            change(P, 2, "INSERT", "gone-in-gap", image={"v": {"S": "0"}}),
            change(P, 3, "INSERT", "changed-in-gap", image={"v": {"S": "0"}}),
        ],
    )
    assert run_snapshot(spark, settings).items == 3
    # The gap (records 4..9, trimmed): gone-in-gap deleted, changed-in-gap updated, new-in-gap made.
    # The reload read the table at or after T; a lagging shard still delivers an older change of
    # changed-in-gap, and the trimmed shard goes on with a change made after T.
    land_reload(log, [item("kept", "0"), item("changed-in-gap", "gap"), item("new-in-gap", "gap")])
    write_object(
        log, [change(Q, 40, "MODIFY", "changed-in-gap", image={"v": {"S": "stale"}}, created=T - 30)]
    )
    write_object(log, [change(P, 10, "MODIFY", "kept", image={"v": {"S": "after"}}, created=T + 20)])
    for row in (item("kept", "after"), item("changed-in-gap", "gap"), item("new-in-gap", "gap")):
        dynamodb.put_item(TableName="orders", Item=row)

    result = run_snapshot(spark, settings)  # incremental would miss the gap: the reload makes it full
    assert result.items == 3
    state = snapshot_tables(settings).state()
    assert state is not None and state.start_time == pytest.approx(T)
    verdict = run_verify(spark, settings, dynamodb)
    assert verdict.counts == {"match": 3, "missing": 0, "extra": 0, "stale": 0}
    # The next run does not take the same reload again.
    assert run_snapshot(spark, settings).up_to_date
    assert snapshot_tables(settings).state().start_time == pytest.approx(T)  # type: ignore[union-attr]


def test_a_reload_without_its_end_or_missing_pages_is_not_used(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(log, [change(P, 1, "INSERT", "a", image={"v": {"S": "0"}})])
    land_reload(log, [item("b", "1")])
    (log / "_reloads" / "r1" / "end.json").unlink()  # the worker stopped mid-reload
    assert run_snapshot(spark, settings).items == 1
    assert snapshot_tables(settings).state().start_time is None  # type: ignore[union-attr]
    land_reload(log, [item("b", "1"), item("c", "1")], counted=5)  # a page missing from the log
    with pytest.raises(ReloadIncompleteError, match="5"):
        run_snapshot(spark, settings)

"""Contract with the writer: objects produced by consumer.sinks.changelog are read as specified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import consumer.processing  # noqa: F401  (first: importing the sink module alone is a circular import)
from consumer.records import StreamRecord
from consumer.sinks.changelog import ChangelogStore, change_line, encode_jsonl, object_name
from pipeline.schemas import ITEM_COLUMN
from pipeline.snapshot_run import read_snapshot, run_snapshot
from tests.pipeline.fixtures import settings_for

pytestmark = pytest.mark.spark


def record(seq: str, event: str, pk: str, image: dict[str, Any] | None) -> dict[str, Any]:
    keys = {"pk": {"S": pk}, "sk": {"S": "a"}}
    body: dict[str, Any] = {
        "ApproximateCreationDateTime": 1763798400.0,
        "Keys": keys,
        "SequenceNumber": seq,
        "SizeBytes": 40,
    }
    if image is not None:
        body["NewImage"] = {**keys, **image}
    return {"eventID": f"e{seq}", "eventName": event, "dynamodb": body}


def land(store: ChangelogStore, shard: str, parents: tuple[str, ...], raws: list[dict[str, Any]]) -> None:
    records = [StreamRecord(raw, shard) for raw in raws]
    lines = [change_line(r, "orders", parents, 1763798401.0) for r in records]
    store.put(
        object_name(shard, records[0].sequence_number, records[-1].sequence_number), encode_jsonl(lines)
    )


def test_objects_written_by_the_changelog_sink(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    store = ChangelogStore(settings.pipeline.changelog_uri)
    parent, child = "shardId-00000001700000000000-0a1b2c3d", "shardId-00000001700000900000-0a1b2c3e"
    first = [
        record("100", "INSERT", "a", {"n": {"N": "1.50"}}),
        record("101", "INSERT", "b", {"n": {"N": "2"}}),
    ]
    land(store, parent, (), first)
    land(store, parent, (), first)  # the replay after a crash
    land(
        store,
        child,
        (parent,),
        [record("2000", "REMOVE", "b", None), record("2001", "MODIFY", "a", {"n": {"N": "3"}})],
    )

    result = run_snapshot(spark, settings)

    assert (result.lines, result.bad_lines, result.new_changes, result.items, result.tombstones) == (
        4,
        0,
        4,
        1,
        1,
    )
    rows = read_snapshot(spark, settings).collect()
    assert [(r["pk"], r[ITEM_COLUMN]["n"]["n"]) for r in rows] == [("a", "3")]

"""Bootstrap: a table's export (or a scan of it) plus the change log that overlaps it = the table."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pipeline.bootstrap import BootstrapError
from pipeline.bootstrap_run import run_bootstrap
from pipeline.reports import run_verify
from pipeline.snapshot_run import run_snapshot, snapshot_tables
from tests.pipeline.fixtures import T0, change, settings_for, write_object

pytestmark = pytest.mark.spark
P = "shardId-00000001"
EXPORT_TIME = T0 + 3600  # the export's point in time


def wire(pk: str, **attributes: dict[str, Any]) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "a"}, **attributes}


def write_export(root: Path, items: list[dict[str, Any]], per_file: int = 2) -> Path:
    """A DynamoDB export's folder as AWS writes it (DYNAMODB_JSON, FULL_EXPORT)."""
    export = root / "AWSDynamoDB" / "01700000000000-abcdef12"
    (export / "data").mkdir(parents=True)
    entries = []
    for number in range(0, len(items), per_file):
        chunk = items[number : number + per_file]
        name = f"file{number:04d}.json.gz"
        with gzip.open(export / "data" / name, "wt", encoding="utf-8") as out:
            out.write("".join(json.dumps({"Item": item}) + "\n" for item in chunk))
        key = f"exports/AWSDynamoDB/01700000000000-abcdef12/data/{name}"
        entries.append({"itemCount": len(chunk), "md5Checksum": "x", "etag": "y", "dataFileS3Key": key})
    (export / "manifest-files.json").write_text("".join(json.dumps(e) + "\n" for e in entries))
    summary = {
        "version": "2020-06-30",
        "exportArn": "arn:aws:dynamodb:us-east-1:123456789012:table/orders/export/01700000000000-abcdef12",
        "startTime": "2025-11-22T09:00:01.000Z",
        "endTime": "2025-11-22T09:05:00.000Z",
        "tableArn": "arn:aws:dynamodb:us-east-1:123456789012:table/orders",
        "exportTime": "2025-11-22T09:00:00.000Z",  # T0 + 3600
        "s3Bucket": "exports-bucket",
        "s3Prefix": "exports",
        "s3SseAlgorithm": "AES256",
        "manifestFilesS3Key": "exports/AWSDynamoDB/01700000000000-abcdef12/manifest-files.json",
        "billedSizeBytes": 100,
        "itemCount": len(items),
        "outputFormat": "DYNAMODB_JSON",
        "exportType": "FULL_EXPORT",
    }
    (export / "manifest-summary.json").write_text(json.dumps(summary))
    return export


def put(client: Any, items: list[dict[str, Any]]) -> None:
    for item in items:
        client.put_item(TableName="orders", Item=item)


def test_export_plus_overlapping_change_log_equals_the_table(
    spark: SparkSession, tmp_path: Path, dynamodb: Any
) -> None:
    settings = settings_for(tmp_path)
    exported = [
        wire("kept", v={"S": "export"}),
        wire("stale-change", v={"S": "export"}, n={"N": "2"}),
        wire("modified", v={"S": "export"}),
        wire("removed", v={"S": "export"}),
        wire("rich", doc={"M": {"a": {"L": [{"N": "1"}, {"BOOL": True}]}}}, tags={"SS": ["x", "y"]}),
    ]
    export = write_export(tmp_path / "exports", exported)
    log = tmp_path / "changelog"
    before, after = EXPORT_TIME - 30, EXPORT_TIME + 30
    write_object(
        log,
        [
            # Older than the export's state of the item: already in it, must not win.
            change(P, 10, "MODIFY", "stale-change", image={"v": {"S": "old"}}, created=before),
            change(P, 11, "INSERT", "gone-before", image={"v": {"S": "old"}}, created=before),
            change(P, 12, "REMOVE", "gone-before", created=before + 1),
            # After it: applied on top.
            change(P, 20, "MODIFY", "modified", image={"v": {"S": "after"}}, created=after),
            change(P, 21, "REMOVE", "removed", created=after),
            change(P, 22, "INSERT", "new", image={"v": {"S": "after"}}, created=after),
        ],
    )
    result = run_bootstrap(spark, settings, export_uri=str(export), now=EXPORT_TIME + 3600)
    assert (result.version, result.items, result.tombstones) == ("000001", 5, 1)

    table = [
        wire("kept", v={"S": "export"}),
        wire("stale-change", v={"S": "export"}, n={"N": "2"}),
        wire("modified", v={"S": "after"}),
        wire("rich", doc={"M": {"a": {"L": [{"N": "1"}, {"BOOL": True}]}}}, tags={"SS": ["y", "x"]}),
        wire("new", v={"S": "after"}),
    ]
    put(dynamodb, table)
    verdict = run_verify(spark, settings, dynamodb)
    assert verdict.counts == {"match": 5, "missing": 0, "extra": 0, "stale": 0}

    # The next run applies only the new part of the log, still never older than the export.
    write_object(
        log,
        [
            change(P, 30, "MODIFY", "kept", image={"v": {"S": "later"}}, created=after + 60),
            change(P, 31, "MODIFY", "new", image={"v": {"S": "late-landed, old"}}, created=before),
        ],
    )
    second = run_snapshot(spark, settings)
    assert (second.version, second.objects_read, second.new_changes) == ("000002", 1, 1)
    put(dynamodb, [wire("kept", v={"S": "later"})])
    assert run_verify(spark, settings, dynamodb).differences == 0
    # A full rebuild starts from the export again: the same table, from the 4 changes made after it.
    assert run_snapshot(spark, settings, full=True).new_changes == 4
    assert run_verify(spark, settings, dynamodb).differences == 0


def test_an_export_in_another_format_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    export = write_export(tmp_path / "exports", [wire("a")])
    summary = json.loads((export / "manifest-summary.json").read_text())
    (export / "manifest-summary.json").write_text(json.dumps({**summary, "exportFormat": "ION"}))
    with pytest.raises(BootstrapError, match="ION"):
        run_bootstrap(spark, settings_for(tmp_path), export_uri=str(export), now=EXPORT_TIME + 3600)
    assert snapshot_tables(settings_for(tmp_path)).state() is None


def test_scan_bootstrap_then_changes(
    spark: SparkSession, tmp_path: Path, dynamodb: Any, endpoint: str
) -> None:
    settings = settings_for(tmp_path).model_copy(update={"endpoint_url": endpoint})
    put(dynamodb, [wire(f"item-{i}", n={"N": str(i)}) for i in range(7)])
    result = run_bootstrap(spark, settings, segments=3)
    assert result.items == 7
    assert run_verify(spark, settings, dynamodb).counts["match"] == 7

    start = snapshot_tables(settings).state()
    assert start is not None and start.start_time is not None
    later = start.start_time + 5
    write_object(
        tmp_path / "changelog",
        [
            change(P, 40, "MODIFY", "item-1", image={"n": {"N": "10"}}, created=later),
            change(P, 41, "REMOVE", "item-2", created=later),
        ],
    )
    dynamodb.put_item(TableName="orders", Item=wire("item-1", n={"N": "10"}))
    dynamodb.delete_item(TableName="orders", Key={"pk": {"S": "item-2"}, "sk": {"S": "a"}})
    run_snapshot(spark, settings)
    assert run_verify(spark, settings, dynamodb).counts == {"match": 6, "missing": 0, "extra": 0, "stale": 0}

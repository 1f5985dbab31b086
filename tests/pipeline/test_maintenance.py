"""A maintenance pass (pipeline/maintenance.py) on a table that runs patched, rewrote and expired:
afterwards each bucket is one file sorted by key, as a rebuild writes it, tombstones past their
retention are gone and younger ones kept, files no kept snapshot names are deleted once old
enough and every kept snapshot still reads, and a point lookup plans one file."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import And, EqualTo
from pyiceberg.manifest import ManifestContent
from pyspark.sql import SparkSession

from pipeline.maintenance import Policy, maintain, referenced_files
from pipeline.reading import path_key
from pipeline.snapshot_run import run_snapshot, snapshot_tables
from tests.pipeline.fixtures import T0, change, settings_for, write_object

pytestmark = pytest.mark.spark
P = "shardId-00000001"
PATCH = {"rewrite_deleted_share": 1.0, "max_files_per_bucket": 1000, "snapshots_kept": 2}


def test_a_pass_compacts_expires_old_tombstones_removes_orphans_and_keeps_every_snapshot_readable(
    spark: SparkSession, tmp_path: Path
) -> None:
    settings = settings_for(tmp_path, **PATCH)
    log = tmp_path / "changelog"
    now = time.time()
    write_object(log, [change(P, i, "INSERT", f"k{i:03d}", image={"n": {"N": str(i)}}) for i in range(200)])
    run_snapshot(spark, settings, buckets=4)
    # Old removes (created in 2025: past any retention), young ones (created now), and modifies.
    write_object(
        log,
        [change(P, 300 + i, "REMOVE", f"k{i:03d}", created=T0) for i in range(0, 40, 4)]
        + [change(P, 400 + i, "REMOVE", f"k{i:03d}", created=now) for i in range(1, 41, 4)],
    )
    run_snapshot(spark, settings)
    write_object(
        log, [change(P, 500 + i, "MODIFY", f"k{i:03d}", image={"n": {"N": "-1"}}) for i in range(100, 200, 3)]
    )
    run_snapshot(spark, settings)
    tables = snapshot_tables(settings)
    assert any(task.deletes for task in tables.tasks(tables.items_name))  # patched, not yet compacted
    before = tables.live_rows(tables.items_name)

    # Every file looks two days old: those no kept snapshot names (2 kept of 3 runs) may go.
    for folder, _, files in os.walk(tmp_path / "snapshot" / "warehouse"):
        for name in files:
            os.utime(Path(folder) / name, (now - 2 * 86400, now - 2 * 86400))
    result = maintain(tables, Policy.of(settings.pipeline), now=now)

    assert result.compacted[tables.items_name] >= 1  # the patched ones; the rest were one file already
    assert result.tombstones_dropped == 10 and tables.live_rows(tables.tombstones_name) == 10
    assert tables.live_rows(tables.items_name) == before  # the items are what they were
    for name in (tables.items_name, tables.tombstones_name):
        per_bucket: dict[int, int] = {}
        for task in tables.tasks(name):
            assert not task.deletes
            per_bucket[task.bucket] = per_bucket.get(task.bucket, 0) + 1
            keys = pq.read_table(task.path.removeprefix("file://"), columns=["pk"]).column("pk").to_pylist()
            assert keys == sorted(keys)
        assert set(per_bucket.values()) == {1}
    items = tables.items_table()
    assert items is not None
    found = {r["pk"]: dict(r["_item"])["n"]["n"] for r in items.scan().to_arrow().to_pylist()}
    gone = {f"k{i:03d}" for i in [*range(0, 40, 4), *range(1, 41, 4)]}
    assert found == {
        f"k{i:03d}": ("-1" if i >= 100 and (i - 100) % 3 == 0 else str(i))
        for i in range(200)
        if f"k{i:03d}" not in gone
    }
    # As a fresh table: one manifest (every scan reads each), and no dictionary on the unique keys.
    current = items.current_snapshot()
    assert current is not None
    # (and the DELETED entries of the delete files the pass removed, which the next commit drops).
    manifests = current.manifests(items.io)
    assert sorted(m.content for m in manifests) == [ManifestContent.DATA, ManifestContent.DELETES]
    assert all(
        m.added_files_count == m.existing_files_count == 0
        for m in manifests
        if m.content == ManifestContent.DELETES
    )
    compacted = [
        t.path.removeprefix("file://") for t in tables.tasks(tables.items_name) if "part-compact" in t.path
    ]
    assert compacted
    for path in compacted:
        group = pq.ParquetFile(path).metadata.row_group(0)
        encodings = {
            group.column(c).path_in_schema: group.column(c).encodings for c in range(group.num_columns)
        }
        assert "RLE_DICTIONARY" not in encodings["pk"] and "RLE_DICTIONARY" in encodings["_event_name"]
    # A point lookup plans the one file of its key's range.
    lookup = items.scan(row_filter=And(EqualTo("pk", "k150"), EqualTo("sk", "a")))
    assert len(list(lookup.plan_files())) == 1 and len(lookup.to_arrow()) == 1

    # Orphans: gone, and nothing a kept snapshot names went with them.
    assert result.orphans_removed > 0
    kept = referenced_files(tables)
    on_disk = {
        path_key(str(Path(folder) / name))
        for folder, _, files in os.walk(tmp_path / "snapshot" / "warehouse")
        for name in files
    }
    assert kept <= on_disk and on_disk <= kept
    for name in tables.names:
        table = tables.load(name)
        assert table is not None
        for snapshot in table.metadata.snapshots:
            table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()  # every kept snapshot still reads

    # The next run patches the compacted table as any other.
    write_object(log, [change(P, 900, "MODIFY", "k150", image={"n": {"N": "-2"}})])
    assert run_snapshot(spark, settings).new_changes == 1
    after = {r["pk"]: dict(r["_item"])["n"]["n"] for r in items.refresh().scan().to_arrow().to_pylist()}
    assert after["k150"] == "-2"

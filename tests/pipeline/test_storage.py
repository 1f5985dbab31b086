"""Stores and the snapshot catalog: the pointer is switched last and names a complete version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipeline.errors import SnapshotStoreError
from pipeline.storage import HadoopStore, LocalStore, store_for
from pipeline.versions import Manifest, SnapshotCatalog


def test_local_catalog_commits_manifest_then_pointer(tmp_path: Path) -> None:
    catalog = SnapshotCatalog(LocalStore(), str(tmp_path / "snap"))
    assert catalog.current() is None
    assert catalog.next_version(None) == "000001"
    catalog.commit(Manifest("000001", {"s1": "0" * 39 + "9"}, {"items": 3}, "2026-01-01T00:00:00+00:00"))
    current = catalog.current()
    assert (
        current is not None
        and current.watermarks == {"s1": "0" * 39 + "9"}
        and current.counts == {"items": 3}
    )
    assert catalog.next_version(current) == "000002"
    assert json.loads((tmp_path / "snap" / "CURRENT").read_text())["version"] == "000001"
    assert [
        p.name for p in (tmp_path / "snap").iterdir() if p.name.startswith(".")
    ] == []  # no temp files left


def test_pointer_to_a_missing_manifest_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "CURRENT").write_text('{"version": "000004"}')
    with pytest.raises(SnapshotStoreError, match="names version 000004, but .*manifest.json is missing"):
        SnapshotCatalog(LocalStore(), str(tmp_path)).current()
    (tmp_path / "CURRENT").write_text("not json")
    with pytest.raises(SnapshotStoreError, match="is not a snapshot pointer"):
        SnapshotCatalog(LocalStore(), str(tmp_path)).current()


def test_local_listing_skips_hidden_and_underscore_folders(tmp_path: Path) -> None:
    for name in ("s1/a.jsonl.gz", "s1/.tmp-b.jsonl.gz", "_temporary/c.jsonl.gz", "s2/d.jsonl.gz"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    found = [Path(p).relative_to(tmp_path).as_posix() for p in LocalStore().list_files(str(tmp_path))]
    assert found == ["s1/a.jsonl.gz", "s2/d.jsonl.gz"]


@pytest.mark.spark
def test_hadoop_store_reads_writes_and_lists_through_the_session(spark: SparkSession, tmp_path: Path) -> None:
    """The store used for s3:// on a cluster, exercised on file:// URIs."""
    store = HadoopStore(spark)
    root = f"file://{tmp_path}"
    assert store.read_text(f"{root}/CURRENT") is None
    store.replace_text(f"{root}/CURRENT", '{"version": "000001"}')
    store.replace_text(f"{root}/CURRENT", '{"version": "000002"}')
    assert store.read_text(f"{root}/CURRENT") == '{"version": "000002"}'
    (tmp_path / "log" / "s1").mkdir(parents=True)
    (tmp_path / "log" / "s1" / "a.jsonl.gz").write_text("x")
    (tmp_path / "log" / "_tmp").mkdir()
    (tmp_path / "log" / "_tmp" / "b.jsonl.gz").write_text("x")
    assert [p.rsplit("/", 2)[-2:] for p in store.list_files(f"{root}/log")] == [["s1", "a.jsonl.gz"]]
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"png")
    store.upload(chart, f"{root}/stats/changes.png")
    assert (tmp_path / "stats" / "changes.png").read_bytes() == b"png"
    assert isinstance(store_for("s3://bucket/prefix", spark), HadoopStore)
    assert isinstance(store_for(str(tmp_path), spark), LocalStore)

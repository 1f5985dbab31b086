"""Stores: listing, small texts replaced atomically, trees removed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipeline.storage import HadoopStore, LocalStore, store_for


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

"""Patched buckets (merge-on-read): old rows deleted by position, new rows in new files, and the
table still what every reader — ours, PyIceberg's, DuckDB through PyIceberg — sees the same way."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline.locate import DRIVER_ROWS, locate
from pipeline.patch import ORDER_COLUMNS
from pipeline.reading import FILE, POS, read_live, to_arrow
from pipeline.run_plan import with_bucket
from pipeline.schemas import KeySchema
from pipeline.snapshot_run import read_snapshot, run_snapshot, snapshot_tables
from pipeline.stored import BUCKET, arrow_schema, stored_schema
from tests.pipeline.fixtures import change, settings_for, write_object
from tests.pipeline.readers import PATCH, REWRITE, delete_files, duckdb_rows, iceberg, ours

pytestmark = pytest.mark.spark
P, C = "shardId-00000001-parent", "shardId-00000002-child"
N = 400  # keys of the first test's table


def test_a_patched_bucket_keeps_its_files_and_deletes_only_the_changed_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    settings = settings_for(tmp_path, **PATCH)
    log = tmp_path / "changelog"
    # 100 keys a bucket: a run's few changes stay far below what rewrites a bucket ahead of its limits.
    write_object(log, [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, N + 1)])
    run_snapshot(spark, settings, buckets=4)
    tables = snapshot_tables(settings)
    before = set(tables.data_files(tables.items_name))

    write_object(
        log,
        [
            change(P, 1050, "MODIFY", "k7", image={"n": {"N": "70"}}),
            change(P, 1051, "REMOVE", "k8"),
            change(P, 1052, "INSERT", "k999", image={"n": {"N": "999"}}),
        ],
    )
    second = run_snapshot(spark, settings)
    after = set(tables.data_files(tables.items_name))
    assert before <= after  # no data file rewritten
    assert len(delete_files(tables, tables.items_name)) >= 1  # k7's and k8's old rows deleted by position
    assert (second.new_changes, second.items, second.tombstones) == (3, N, 1)
    assert second.buckets_patched == second.buckets_changed  # every changed bucket patched

    expected = {**{f"k{i}": str(i) for i in range(1, N + 1) if i != 8}, "k7": "70", "k999": "999"}
    assert ours(spark, settings) == expected
    assert iceberg(settings) == expected
    assert duckdb_rows(settings) == expected
    assert tables.live_rows(tables.items_name) == N and tables.live_rows(tables.tombstones_name) == 1

    # A second patch of the same buckets folds their delete files: one per bucket and table, still.
    write_object(
        log, [change(P, 1055, "MODIFY", "k9", image={"n": {"N": "90"}}), change(P, 1056, "REMOVE", "k999")]
    )
    assert run_snapshot(spark, settings).buckets_patched >= 1
    for name in (tables.items_name, tables.tombstones_name):
        per_bucket: dict[int, set[str]] = {}
        for task in tables.tasks(name):
            per_bucket.setdefault(task.bucket, set()).update(path for path, _ in task.deletes)
        assert all(len(files) <= 1 for files in per_bucket.values()), per_bucket
    expected = {**expected, "k9": "90"}
    del expected["k999"]
    assert ours(spark, settings) == expected == iceberg(settings) == duckdb_rows(settings)

    # A rewrite folds the deletes in: the bucket's files and delete files are replaced by one file each.
    # Every other key changes (k7 and k9 back to their first values), in every bucket; the others
    # are kept rows.
    rewrite = settings_for(tmp_path, **REWRITE)
    write_object(
        log, [change(P, 1060, "MODIFY", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, N + 1, 2)]
    )
    run_snapshot(spark, rewrite)
    assert (
        delete_files(tables, tables.items_name) == set()
        and delete_files(tables, tables.tombstones_name) == set()
    )
    # Few rows: the driver rewrote each bucket, its kept rows and the run's new rows in one file.
    items_files = [task.path for task in tables.tasks(tables.items_name)]
    assert len(items_files) == 4 and all("/part-rewrite-" in path for path in items_files), items_files
    expected = {f"k{i}": str(i) for i in range(1, N + 1) if i != 8}
    assert ours(spark, rewrite) == expected == iceberg(rewrite) == duckdb_rows(rewrite)
    # Every key once: a replaced row left beside its new one would hide in the dicts above.
    keys = [row["pk"] for row in read_snapshot(spark, rewrite).select("pk").collect()]
    assert len(keys) == len(set(keys)) == N - 1 == tables.live_rows(tables.items_name)


def _random_runs(seed: int, runs: int) -> list[list[dict[str, Any]]]:
    """Batches of changes over 12 keys: inserts, modifies, removes, copies of earlier changes, and
    a parent's change that lands after its child's (ordered before them)."""
    rng = random.Random(seed)
    seq = {P: 1_000, C: 10_000}
    batches: list[list[dict[str, Any]]] = []
    sent: list[dict[str, Any]] = []
    for _ in range(runs):
        batch: list[dict[str, Any]] = []
        for _ in range(rng.randrange(3, 9)):
            shard = rng.choice((P, C))
            seq[shard] += rng.randrange(1, 5)
            key = f"k{rng.randrange(12)}"
            event = rng.choice(("INSERT", "MODIFY", "MODIFY", "REMOVE"))
            image = None if event == "REMOVE" else {"n": {"N": str(seq[shard])}}
            batch.append(
                change(shard, seq[shard], event, key, image=image, parents=[P] if shard == C else [])
            )
        if sent and rng.random() < 0.5:
            batch.append(rng.choice(sent))  # a replayed copy
        sent += batch
        batches.append(batch)
    return batches


def _land(log: Path, batch: list[dict[str, Any]]) -> None:
    for shard in (P, C):
        mine = [c for c in batch if c["shardId"] == shard]
        if mine:
            write_object(log, mine)


def test_patched_and_rewritten_runs_equal_a_full_rebuild(spark: SparkSession, tmp_path: Path) -> None:
    """The same batches, one run each, in three tables: always patched, always rewritten, and rebuilt
    from the whole log at the end. Every reader sees the same items in all three, whether the
    changed keys' rows were located on the driver or by Spark: the incremental runs take turns, so
    each table holds the patches (or rewrites) of both and each path runs on the other's output."""
    first = [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(12, 72)]
    batches = [first, *_random_runs(3, 4)]
    states = []
    for mode, overrides in (("patch", PATCH), ("rewrite", REWRITE)):
        settings = settings_for(tmp_path / mode, **overrides)
        patched = 0
        for number, batch in enumerate(batches):
            _land(tmp_path / mode / "changelog", batch)
            driver_rows = DRIVER_ROWS if number % 2 else 0
            patched += run_snapshot(spark, settings, buckets=2, driver_rows=driver_rows).buckets_patched
        assert (patched > 0) == (mode == "patch")
        states.append((ours(spark, settings), iceberg(settings), duckdb_rows(settings)))
    full = settings_for(tmp_path / "patch", **PATCH)
    rebuilt = run_snapshot(spark, full, full=True)
    assert rebuilt.version == "000006"
    expected = ours(spark, full)
    assert all(view == expected for state in states for view in state), (states, expected)


def test_the_driver_and_spark_locate_the_same_rows(spark: SparkSession, tmp_path: Path) -> None:
    """The two ways an incremental run finds the changed keys' live rows (pipeline/locate.py on the
    driver, read_live in Spark) give the same rows, files and positions on a table with patches and
    position deletes in both tables, for keys that are live, removed, replaced or absent."""
    settings = settings_for(tmp_path, **PATCH)
    first = [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, 40)]
    for batch in [first, *_random_runs(5, 4)]:
        _land(tmp_path / "changelog", batch)
        run_snapshot(spark, settings, buckets=2)
    tables = snapshot_tables(settings)
    files = [*tables.tasks(tables.items_name), *tables.tasks(tables.tombstones_name)]
    assert any(task.deletes for task in files) and len({task.bucket for task in files}) == 2
    keys = KeySchema.of(settings.table)
    layout = tables.state().ranges  # type: ignore[union-attr]
    assert layout is not None and layout.buckets == 2
    candidates = with_bucket(
        spark.createDataFrame([(f"k{i}", "a") for i in range(45)], "pk string, sk string"), keys, layout
    )
    columns = [*keys.names, BUCKET, *ORDER_COLUMNS]
    stored = stored_schema(keys)
    schema = arrow_schema(T.StructType([stored[name] for name in columns]))
    driver = locate(tables.items_table(), files, to_arrow(candidates), keys.names, schema)
    by_spark = read_live(
        spark,
        stored,
        files,
        columns=columns,
        locate=True,
        only=candidates.select(*keys.names),
        keys=keys.names,
    )
    names = [*columns, FILE, POS]
    found = sorted(tuple(row[n] for n in names) for row in driver.to_pylist())
    assert found == sorted(tuple(row[n] for n in names) for row in by_spark.collect())
    assert len(found) == len({row[:2] for row in found}) > 20  # one live row per key


def test_each_table_decides_its_buckets_few_tombstones_are_rewritten_while_items_are_patched(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Default limits: 400 items in 2 buckets take 3 changes as a patch, while the tombstones table,
    nearly empty, has its buckets rewritten (one file each, no delete files) instead of gaining a
    tiny file per bucket and run."""
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(log, [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, 401)])
    run_snapshot(spark, settings, buckets=2)
    tables = snapshot_tables(settings)
    before = set(tables.data_files(tables.items_name))
    expected = {f"k{i}": str(i) for i in range(1, 401)}
    for round_, (removed, modified) in enumerate((("k5", "k6"), ("k7", "k8"), ("k9", "k10"))):
        seq = 1000 + 10 * round_
        write_object(
            log,
            [
                change(P, seq, "REMOVE", removed),
                change(P, seq + 1, "MODIFY", modified, image={"n": {"N": "-1"}}),
                change(P, seq + 2, "MODIFY", "k1", image={"n": {"N": str(seq)}}),
            ],
        )
        result = run_snapshot(spark, settings)
        del expected[removed]
        expected[modified], expected["k1"] = "-1", str(seq)
        assert result.buckets_patched == result.buckets_changed  # the items table: patched
        assert before <= set(tables.data_files(tables.items_name))
        assert delete_files(tables, tables.items_name)
        tombstone_files: dict[int, int] = {}
        for task in tables.tasks(tables.tombstones_name):
            assert not task.deletes
            tombstone_files[task.bucket] = tombstone_files.get(task.bucket, 0) + 1
        assert set(tombstone_files.values()) == {1}, tombstone_files  # rewritten: one file per bucket
        assert tables.live_rows(tables.tombstones_name) == round_ + 1
        assert ours(spark, settings) == expected == iceberg(settings) == duckdb_rows(settings)

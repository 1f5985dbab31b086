"""Patched buckets (merge-on-read): old rows deleted by position, new rows in new files, and the
table still what every reader — ours, PyIceberg's, DuckDB through PyIceberg — sees the same way."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline import commit, deletes
from pipeline.errors import ConcurrentRunError, HalfCommittedError
from pipeline.locate import DRIVER_ROWS, locate
from pipeline.patch import ORDER_COLUMNS
from pipeline.reading import FILE, POS, read_live, to_arrow
from pipeline.run_plan import with_bucket
from pipeline.schemas import ITEM_COLUMN, KeySchema
from pipeline.snapshot_run import read_snapshot, run_snapshot, snapshot_tables
from pipeline.stored import BUCKET, arrow_schema, stored_schema
from pipeline.table import SnapshotTables
from tests.pipeline.fixtures import change, settings_for, write_object

pytestmark = pytest.mark.spark
P, C = "shardId-00000001-parent", "shardId-00000002-child"
PATCH = {"rewrite_deleted_share": 1.0, "max_files_per_bucket": 1000}  # patch every bucket holding rows
REWRITE = {"rewrite_deleted_share": 0.01}  # rewrite every changed bucket
N = 400  # keys of the first test's table


def ours(spark: SparkSession, settings: Any) -> dict[str, str]:
    return {r["pk"]: r[ITEM_COLUMN]["n"]["n"] for r in read_snapshot(spark, settings).collect()}


def iceberg(settings: Any) -> dict[str, str]:
    """The snapshot table through PyIceberg's own scan (it applies the position deletes itself)."""
    tables = snapshot_tables(settings)
    table = tables.items_table()
    assert table is not None
    rows = table.scan(selected_fields=("pk", ITEM_COLUMN)).to_arrow().to_pylist()
    return {r["pk"]: dict(r[ITEM_COLUMN])["n"]["n"] for r in rows}


def duckdb_rows(settings: Any) -> dict[str, str]:
    table = snapshot_tables(settings).items_table()
    assert table is not None
    connection = table.scan().to_duckdb("snap")
    return dict(connection.execute("SELECT pk, _item['n'].n FROM snap").fetchall())


def delete_files(tables: SnapshotTables, name: str) -> set[str]:
    return {path for task in tables.tasks(name) for path, _ in task.deletes}


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


@pytest.mark.parametrize(("seed", "driver_rows"), [(3, DRIVER_ROWS), (17, 0)], ids=["driver", "spark"])
def test_patched_and_rewritten_runs_equal_a_full_rebuild(
    spark: SparkSession, tmp_path: Path, seed: int, driver_rows: int
) -> None:
    """The same batches, one run each, in three tables: always patched, always rewritten, and rebuilt
    from the whole log at the end. Every reader sees the same items in all three, whether the
    changed keys' rows were located on the driver or by Spark."""
    first = [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(12, 72)]
    batches = [first, *_random_runs(seed, 4)]
    states = []
    for mode, overrides in (("patch", PATCH), ("rewrite", REWRITE)):
        settings = settings_for(tmp_path / mode, **overrides)
        patched = 0
        for batch in batches:
            _land(tmp_path / mode / "changelog", batch)
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


def test_a_half_committed_run_is_repaired_by_the_next(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tombstones table committed, the snapshot table not: k1 is then live in both; the rerun
    deletes the row that lost and the table is whole again."""
    settings = settings_for(tmp_path, **PATCH)
    log = tmp_path / "changelog"
    write_object(log, [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, 11)])
    run_snapshot(spark, settings, buckets=2)
    write_object(log, [change(P, 20, "REMOVE", "k1")])

    calls: list[str] = []
    original = commit.replace

    def fail_second(table: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(".".join(table.name()))
        if len(calls) == 2:
            raise RuntimeError("catalog unreachable")
        original(table, *args, **kwargs)

    monkeypatch.setattr(commit, "replace", fail_second)
    with pytest.raises(HalfCommittedError, match="catalog unreachable"):
        run_snapshot(spark, settings)
    monkeypatch.undo()
    tables = snapshot_tables(settings)
    assert calls[0] == tables.tombstones_name and tables.live_rows(tables.tombstones_name) == 1
    assert "k1" in ours(spark, settings)  # the snapshot table did not move

    again = run_snapshot(spark, settings)
    assert (again.items, again.tombstones) == (9, 1)
    assert ours(spark, settings) == {f"k{i}": str(i) for i in range(2, 11)} == iceberg(settings)


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


def _twenty_items_then_two_changes(spark: SparkSession, tmp_path: Path) -> tuple[Any, Path]:
    """k1..k20 in a snapshot of 2 patched buckets, then k3 modified and k4 removed in the log."""
    settings = settings_for(tmp_path, **PATCH)
    log = tmp_path / "changelog"
    write_object(log, [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, 21)])
    run_snapshot(spark, settings, buckets=2)
    write_object(
        log, [change(P, 30, "MODIFY", "k3", image={"n": {"N": "30"}}), change(P, 31, "REMOVE", "k4")]
    )
    return settings, log


def test_a_run_that_another_run_overtook_writes_nothing_and_the_rerun_merges_on_top(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two snapshot runs at once: the second to commit finds the tables moved since it planned
    (which rows to delete, which buckets to replace) and stops before writing; run again, it
    merges its changes on top of the other's."""
    settings, log = _twenty_items_then_two_changes(spark, tmp_path)

    original = SnapshotTables.commit
    overtaken: list[str] = []

    def another_run_first(self: SnapshotTables, **kwargs: Any) -> str:
        if not overtaken:
            overtaken.append("once")
            write_object(log, [change(P, 40, "MODIFY", "k5", image={"n": {"N": "40"}})])
            assert run_snapshot(spark, settings).new_changes == 3  # the other run: every change so far
        return original(self, **kwargs)

    monkeypatch.setattr(SnapshotTables, "commit", another_run_first)
    with pytest.raises(ConcurrentRunError, match="another run or a maintenance pass committed"):
        run_snapshot(spark, settings)
    monkeypatch.undo()
    expected = {**{f"k{i}": str(i) for i in range(1, 21) if i != 4}, "k3": "30", "k5": "40"}
    assert ours(spark, settings) == expected == iceberg(settings)  # the other run's result, whole

    write_object(log, [change(P, 50, "MODIFY", "k6", image={"n": {"N": "50"}})])
    again = run_snapshot(spark, settings)
    assert again.new_changes == 1 and (again.items, again.tombstones) == (19, 1)
    assert ours(spark, settings) == {**expected, "k6": "50"} == iceberg(settings) == duckdb_rows(settings)


def _live_files(manifest: Any) -> int:
    return int(manifest.added_files_count) + int(manifest.existing_files_count)


def test_manifests_naming_no_live_file_are_dropped_and_many_are_merged(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every patch run adds a data and a delete manifest and leaves its bucket's previous delete
    manifest with only DELETED entries: the next commit drops such manifests, and merges the
    untouched ones once there are more than MERGE_MANIFESTS_AT (2 here), so a table's manifests
    (which every scan and commit reads) stay few however many runs it has had, and every reader
    still sees what a full rebuild sees."""
    monkeypatch.setattr(deletes, "MERGE_MANIFESTS_AT", 2)
    settings = settings_for(tmp_path, **PATCH)
    log = tmp_path / "changelog"
    write_object(log, [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, 41)])
    run_snapshot(spark, settings, buckets=2)
    tables = snapshot_tables(settings)
    expected = {f"k{i}": str(i) for i in range(1, 41)}
    merged = False
    for round_ in range(7):
        key, seq = f"k{round_ + 1}", 100 + round_
        write_object(log, [change(P, seq, "MODIFY", key, image={"n": {"N": str(seq)}})])
        assert run_snapshot(spark, settings).buckets_patched >= 1
        expected[key] = str(seq)
        table = tables.items_table()
        assert table is not None
        current = table.current_snapshot()
        assert current is not None
        manifests = current.manifests(table.io)
        # Only this commit's own manifests may name no live file (its DELETED entries).
        assert all(_live_files(m) > 0 or m.added_snapshot_id == current.snapshot_id for m in manifests)
        untouched = [m for m in manifests if m.added_snapshot_id != current.snapshot_id]
        assert len(untouched) <= 3, [(m.manifest_path, _live_files(m)) for m in manifests]
        for m in manifests:  # a merge: only EXISTING entries, each keeping the snapshot that added it
            if (
                m.added_snapshot_id == current.snapshot_id
                and not m.added_files_count
                and not m.deleted_files_count
            ):
                entries = m.fetch_manifest_entry(table.io, discard_deleted=False)
                assert entries and all(e.snapshot_id != current.snapshot_id for e in entries)
                merged = True
    assert merged  # some commit merged untouched manifests into one of its own
    assert ours(spark, settings) == expected == iceberg(settings) == duckdb_rows(settings)
    run_snapshot(spark, settings, full=True)
    assert ours(spark, settings) == expected == iceberg(settings)


def test_each_table_keeps_its_newest_snapshots_and_metadata_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``pipeline.snapshots_kept`` (3 here): older snapshots leave the tables' metadata, and older
    metadata files their folder, so that a commit's cost does not grow with the runs before it; the
    table reads the same, and the newest snapshots still travel back in time."""
    settings = settings_for(tmp_path, snapshots_kept=3, **PATCH)
    log = tmp_path / "changelog"
    write_object(log, [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, 21)])
    run_snapshot(spark, settings, buckets=2)
    tables = snapshot_tables(settings)
    first = tables.items_table()
    assert first is not None and first.current_snapshot() is not None
    tagged = first.current_snapshot().snapshot_id
    first.manage_snapshots().create_tag(tagged, "before-changes").commit()  # a user's tag: never expired
    expected = {f"k{i}": str(i) for i in range(1, 21)}
    for round_ in range(5):
        seq = 100 + 2 * round_
        write_object(
            log,
            [
                change(P, seq, "MODIFY", f"k{round_ + 1}", image={"n": {"N": str(seq)}}),
                change(P, seq + 1, "REMOVE", f"k{round_ + 10}"),
            ],
        )
        run_snapshot(spark, settings)
        expected[f"k{round_ + 1}"] = str(seq)
        del expected[f"k{round_ + 10}"]
    for name, tag in ((tables.items_name, 1), (tables.tombstones_name, 0)):
        table = tables.catalog.load_table(name)
        assert len(table.metadata.snapshots) == 3 + tag, name
        folder = Path(table.location().removeprefix("file://")) / "metadata"
        assert len(list(folder.glob("*.metadata.json"))) <= 4, sorted(folder.iterdir())
    assert ours(spark, settings) == expected == iceberg(settings) == duckdb_rows(settings)
    items = tables.items_table()
    assert items is not None
    oldest = min(
        (s for s in items.metadata.snapshots if s.snapshot_id != tagged), key=lambda s: s.sequence_number
    )
    before = items.scan(snapshot_id=oldest.snapshot_id, selected_fields=("pk",)).to_arrow().num_rows
    assert before == len(expected) + 2  # two runs back: one more removed key each run
    assert items.scan(snapshot_id=tagged, selected_fields=("pk",)).to_arrow().num_rows == 20


def test_a_commit_that_loses_the_race_to_another_run_is_not_retried_on_top_of_it(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run commits after this one's last check and before its own commit: PyIceberg would
    retry the commit on top of the other's snapshot, with deletes planned on the snapshot this run
    read. The tables do not retry (commit.retry.num-retries = 0), so this run stops with
    ConcurrentRunError, writes nothing, and merges on top of the other when run again."""
    settings, log = _twenty_items_then_two_changes(spark, tmp_path)

    original = commit.replace
    raced: list[str] = []

    def other_run_commits_first(table: Any, *args: Any, **kwargs: Any) -> None:
        if not raced:
            raced.append("once")
            write_object(log, [change(P, 40, "MODIFY", "k3", image={"n": {"N": "40"}})])
            assert run_snapshot(spark, settings).new_changes == 3  # the other run, start to end
        original(table, *args, **kwargs)  # ``table`` was loaded before the other run committed

    monkeypatch.setattr(commit, "replace", other_run_commits_first)
    with pytest.raises(ConcurrentRunError, match="while this run was committing"):
        run_snapshot(spark, settings)
    monkeypatch.undo()
    expected = {**{f"k{i}": str(i) for i in range(1, 21) if i != 4}, "k3": "40"}
    assert ours(spark, settings) == expected == iceberg(settings)  # the other run's result, whole

    again = run_snapshot(spark, settings)
    assert again.up_to_date  # the other run merged every change there is
    assert ours(spark, settings) == expected == iceberg(settings) == duckdb_rows(settings)

"""Commits of the snapshot tables under failure and concurrency: a run that committed only the
tombstones table is repaired by the next, a run another run overtook writes nothing, a commit that
loses the race is not retried on top of the other, and what each commit keeps of the history
(snapshots, metadata files, manifests) stays bounded. The loops run a few rounds past the bound
they check: enough that without the bound the count would already exceed it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pipeline import commit, deletes
from pipeline.errors import ConcurrentRunError, HalfCommittedError
from pipeline.snapshot_run import run_snapshot, snapshot_tables
from pipeline.table import SnapshotTables
from tests.pipeline.fixtures import change, settings_for, write_object
from tests.pipeline.readers import PATCH, duckdb_rows, iceberg, ours

pytestmark = pytest.mark.spark
P = "shardId-00000001-parent"


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
    for round_ in range(4):
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
    for round_ in range(3):
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

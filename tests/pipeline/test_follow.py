"""``follow`` (pipeline/follow.py) against its two promises: killed anywhere in a run and started
again, it commits every change once; with maintenance passes committing beside it, nothing is lost.

"Killed" is a BaseException raised at the point a SIGKILL could strike — after Spark wrote the run's
files, between the two tables' commits — so that nothing after it in the run happens; a new
``follow`` with its own catalog connection then starts from what the tables hold, as a new process
would. tests/pipeline/test_entry_points.py kills a real ``consumer pipeline follow`` process.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pipeline import commit
from pipeline.errors import ConcurrentRunError
from pipeline.follow import follow
from pipeline.maintenance import Policy, maintain
from pipeline.snapshot_run import SnapshotResult, snapshot_tables
from pipeline.table import SnapshotTables
from tests.pipeline.fixtures import change, settings_for, write_object

pytestmark = pytest.mark.spark
SHARDS = ("shardId-00000001", "shardId-00000002")


class Killed(BaseException):
    """The process dies here: nothing after this point of the run happens."""


def batches(count: int, size: int) -> list[list[dict[str, Any]]]:
    """Changes over 30 keys, in batches landed one object per shard: inserts, modifies, removes."""
    out: list[list[dict[str, Any]]] = []
    seq = 0
    for number in range(count):
        batch = []
        for _ in range(size):
            seq += 1
            key = f"k{(seq * 7) % 30}"
            event = ("INSERT", "MODIFY", "MODIFY", "REMOVE")[(seq + number) % 4]
            batch.append(change(SHARDS[seq % 2], seq, event, key, image={"n": {"N": str(seq)}}))
        out.append(batch)
    return out


def land(log: Path, batch: list[dict[str, Any]]) -> None:
    for shard in SHARDS:
        mine = [c for c in batch if c["shardId"] == shard]
        if mine:
            write_object(log, mine)


def expected(changes: list[dict[str, Any]]) -> dict[str, str]:
    latest: dict[str, dict[str, Any]] = {}
    for c in sorted(changes, key=lambda c: int(c["sequenceNumber"])):
        latest[c["keys"]["pk"]["S"]] = c
    return {k: c["newImage"]["n"]["N"] for k, c in latest.items() if c["eventName"] != "REMOVE"}


def items(tables: SnapshotTables) -> dict[str, str]:
    table = tables.items_table()
    assert table is not None
    rows = table.scan(selected_fields=("pk", "_item")).to_arrow().to_pylist()
    found = [r["pk"] for r in rows]
    assert len(found) == len(set(found)), "a key twice"
    return {r["pk"]: dict(r["_item"])["n"]["n"] for r in rows}


def committed_changes(tables: SnapshotTables) -> int:
    """New changes the items table's commits say they merged, over its whole kept history."""
    table = tables.items_table()
    assert table is not None
    return sum(
        int(s.summary.additional_properties.get("consumer.new-changes", 0))
        for s in table.metadata.snapshots
        if s.summary is not None
    )


def follow_until_current(spark: SparkSession, settings: Any) -> None:
    """A fresh ``follow`` (its own catalog connection, as a new process has) until it finds
    nothing new."""
    current: list[SnapshotResult] = []
    follow(
        spark,
        settings,
        stop=lambda: bool(current),
        tables=snapshot_tables(settings),
        sleep=lambda _: None,
        maintenance=False,
        on_run=lambda result: current.append(result) if result.up_to_date else None,
    )


@pytest.mark.emr
def test_follow_killed_mid_run_and_started_again_commits_each_change_once(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed at the two points where a kill leaves something behind, one after the other, then
    started once: the rerun merges every change after the last commit once, and repairs the half
    commit. (Started again after each kill separately is what test_entry_points's real process
    shows for the first point.)"""
    settings = settings_for(tmp_path, snapshots_kept=100)
    log = tmp_path / "changelog"
    first, second, third = batches(3, 12)
    land(log, first)
    follow_until_current(spark, settings)
    tables = snapshot_tables(settings)

    # Killed once Spark wrote the run's files, before any commit: nothing of the run is in the tables.
    land(log, second)

    def killed_before_commit(self: SnapshotTables, **_: Any) -> str:
        raise Killed

    with monkeypatch.context() as patched:
        patched.setattr(SnapshotTables, "commit", killed_before_commit)
        with pytest.raises(Killed):
            follow_until_current(spark, settings)
    assert items(tables) == expected(first)

    # Killed between the tombstones table's commit and the items table's: the next run repairs it.
    land(log, third)
    original = commit.replace
    calls: list[str] = []

    def killed_between_tables(table: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(".".join(table.name()))
        if len(calls) == 2:
            raise Killed
        original(table, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(commit, "replace", killed_between_tables)
        with pytest.raises(Killed):
            follow_until_current(spark, settings)
    assert calls == [tables.tombstones_name, tables.items_name]
    assert items(tables) == expected(first)  # the items table did not move
    follow_until_current(spark, settings)

    every = first + second + third
    assert items(tables) == expected(every)
    assert committed_changes(tables) == len(every)  # each change in exactly one commit


def test_maintenance_beside_follow_loses_nothing(spark: SparkSession, tmp_path: Path) -> None:
    """Maintenance passes (compaction of every patched bucket) commit while ``follow`` merges new
    objects: whichever loses a race commits nothing and tries again, and the table ends whole."""
    settings = settings_for(
        tmp_path, snapshots_kept=200, rewrite_deleted_share=1.0, max_files_per_bucket=1000
    )  # patches pile up: every pass has buckets to compact
    log = tmp_path / "changelog"
    waiting = batches(4, 20)
    every = [c for batch in waiting for c in batch]
    land(log, waiting.pop(0))
    follow_until_current(spark, settings)  # the first run lays the table out

    def land_next(result: SnapshotResult) -> None:
        if waiting:
            land(log, waiting.pop(0))
        elif result.up_to_date:
            finished.set()

    finished = threading.Event()
    failure: list[BaseException] = []

    def following() -> None:
        try:
            follow(
                spark,
                settings,
                stop=finished.is_set,
                tables=snapshot_tables(settings),
                sleep=lambda _: None,
                maintenance=False,
                on_run=land_next,
            )
        except BaseException as exc:
            failure.append(exc)
            finished.set()

    runner = threading.Thread(target=following, name="follow")
    runner.start()
    policy = Policy(orphan_min_age_hours=24)
    compacted = lost = 0
    try:
        while not finished.is_set():
            try:
                result = maintain(snapshot_tables(settings), policy)
                compacted += sum(result.compacted.values())
            except ConcurrentRunError:
                lost += 1
            time.sleep(0.2)  # passes back to back would leave follow's runs little of the two cores
    finally:
        runner.join(timeout=600)
    assert not failure, failure
    tables = snapshot_tables(settings)
    assert compacted > 0  # passes did commit between the runs
    assert items(tables) == expected(every)
    assert committed_changes(tables) == len(every)

"""The snapshot job on small hand-made change logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline import parse, snapshot
from pipeline.errors import BadChangeLogError
from pipeline.schemas import EVENT, ITEM, ITEM_COLUMN, RAW_LINES, SHARD_ID, KeySchema
from pipeline.snapshot_run import read_snapshot, run_snapshot, snapshot_tables
from pipeline.stored import BUCKET, stored_schema
from tests.pipeline.fixtures import T0, change, n_attr, s_attr, settings_for, write_object
from tests.pipeline.frames import assert_frames_equal

pytestmark = pytest.mark.spark

VIEW = T.StructType(
    [
        T.StructField("pk", T.StringType()),
        T.StructField("sk", T.StringType()),
        T.StructField(ITEM_COLUMN, ITEM),
    ]
)
P, C1, C2 = "shardId-00000001-parent", "shardId-00000002-child1", "shardId-00000002-child2"


def item(pk: str, sk: str = "a", **attrs: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    return (pk, sk, {"pk": s_attr(pk), "sk": s_attr(sk), **attrs})


def current(spark: SparkSession, settings: Any) -> DataFrame:
    return read_snapshot(spark, settings).select("pk", "sk", ITEM_COLUMN)


def expect(spark: SparkSession, rows: list[tuple[str, str, dict[str, Any]]]) -> DataFrame:
    return spark.createDataFrame(rows, VIEW)


def version(settings: Any) -> str | None:
    """The committed snapshot version, None before the first committed run."""
    state = snapshot_tables(settings).state()
    return None if state is None or state.run == 0 else state.version


def test_insert_modify_remove_and_reinsert(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(
        log,
        [
            change(P, 100, "INSERT", "gone", image={"n": {"N": "1"}}),
            change(P, 101, "INSERT", "kept", image={"n": {"N": "1"}}),
            change(P, 102, "MODIFY", "gone", image={"n": {"N": "2"}}),
            change(P, 103, "MODIFY", "kept", image={"n": {"N": "2"}}),
            change(P, 104, "REMOVE", "gone"),
            change(P, 105, "INSERT", "back", image={"n": {"N": "1"}}),
            change(P, 106, "REMOVE", "back"),
            change(P, 107, "INSERT", "back", image={"n": {"N": "3"}}),
        ],
    )
    result = run_snapshot(spark, settings)
    assert (result.version, result.new_changes, result.items, result.tombstones) == ("000001", 8, 2, 1)
    assert_frames_equal(
        current(spark, settings),
        expect(spark, [item("kept", n=n_attr("2")), item("back", n=n_attr("3"))]),
    )


def test_order_is_numeric_across_parent_and_child_shards(spark: SparkSession, tmp_path: Path) -> None:
    """A child's numbers are longer than its parent's: compared as integers, not as text."""
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(
        log, [change(P, 900, "INSERT", "x", image={"v": {"S": "parent"}}), change(P, 950, "INSERT", "y")]
    )
    write_object(
        log,
        [
            change(C1, 1000, "MODIFY", "x", image={"v": {"S": "child"}}, parents=[P]),
            change(C1, 1001, "REMOVE", "y", parents=[P]),
        ],
    )
    write_object(log, [change(C2, 10**39 + 5, "INSERT", "z", image={"v": {"S": "40 digits"}}, parents=[P])])
    run_snapshot(spark, settings)
    assert_frames_equal(
        current(spark, settings),
        expect(spark, [item("x", v=s_attr("child")), item("z", v=s_attr("40 digits"))]),
    )


def test_replays_and_copies_count_once(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    batch = [
        change(P, 10, "INSERT", "a", image={"c": {"N": "1"}}),
        change(P, 11, "MODIFY", "a", image={"c": {"N": "2"}}),
    ]
    write_object(log, batch)
    write_object(log, batch)  # a replay after a crash: same name, overwritten
    # the same changes cut into a different batch by the worker that took over, plus one new one
    write_object(log, [*batch[1:], change(P, 12, "INSERT", "b")])
    result = run_snapshot(spark, settings)
    assert result.new_changes == 3
    assert_frames_equal(current(spark, settings), expect(spark, [item("a", c=n_attr("2")), item("b")]))


@pytest.mark.emr
def test_incremental_runs_equal_a_full_rebuild_and_are_idempotent(
    spark: SparkSession, tmp_path: Path
) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(
        log, [change(P, 10, "INSERT", "a"), change(P, 11, "INSERT", "b"), change(P, 12, "INSERT", "c")]
    )
    first = run_snapshot(spark, settings)
    again = run_snapshot(spark, settings)
    assert again.up_to_date and again.version == first.version == "000001"

    write_object(log, [change(P, 13, "REMOVE", "a"), change(P, 14, "MODIFY", "b", image={"x": {"S": "1"}})])
    write_object(log, [change(C1, 20, "INSERT", "d", parents=[P])])
    second = run_snapshot(spark, settings)
    assert (second.version, second.objects_read, second.objects_already_merged, second.new_changes) == (
        "000002",
        2,
        1,
        3,
    )
    incremental = current(spark, settings)
    expected = expect(spark, [item("b", x=s_attr("1")), item("c"), item("d")])
    assert_frames_equal(incremental, expected)

    rebuilt = run_snapshot(spark, settings, full=True)
    assert (rebuilt.version, rebuilt.objects_read, rebuilt.new_changes) == ("000003", 3, 6)
    assert_frames_equal(current(spark, settings), expected)


def test_late_parent_change_does_not_resurrect_a_removed_item(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(log, [change(C1, 500, "REMOVE", "a", parents=[P])])
    run_snapshot(spark, settings)
    write_object(log, [change(P, 400, "INSERT", "a")])  # lands late, ordered before the REMOVE
    run_snapshot(spark, settings)
    assert current(spark, settings).count() == 0


def test_every_attribute_type_keeps_its_type(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    image = {
        "s": {"S": "text"},
        "n": {"N": "12345678901234567890123456789012345678"},
        "f": {"N": "-0.000001"},
        "b": {"B": "AAEC/w=="},
        "t": {"BOOL": True},
        "z": {"NULL": True},
        "ss": {"SS": ["x", "y"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": ["AA==", "AQ=="]},
        "m": {"M": {"k": {"N": "1.50"}, "l": {"L": [{"S": "q"}, {"B": "AA=="}]}}},
        "l": {"L": [{"N": "1"}, {"M": {}}]},
    }
    write_object(tmp_path / "changelog", [change(P, 1, "INSERT", "all", image=image)])
    run_snapshot(spark, settings)
    none = dict.fromkeys(("s", "n", "b", "bool", "null", "ss", "ns", "bs", "m", "l"))

    def stored(**value: Any) -> dict[str, Any]:
        return {**none, **value}

    expected = item(
        "all",
        s=stored(s="text"),
        n=stored(n="12345678901234567890123456789012345678"),
        f=stored(n="-0.000001"),
        b=stored(b=bytearray(b"\x00\x01\x02\xff")),
        t=stored(bool=True),
        z=stored(null=True),
        ss=stored(ss=["x", "y"]),
        ns=stored(ns=["1", "2.5"]),
        bs=stored(bs=[bytearray(b"\x00"), bytearray(b"\x01")]),
        m=stored(m='{"k":{"N":"1.50"},"l":{"L":[{"S":"q"},{"B":"AA=="}]}}'),
        l=stored(l='[{"N":"1"},{"M":{}}]'),
    )
    assert_frames_equal(current(spark, settings), expect(spark, [expected]))


def test_malformed_lines_fail_the_run_with_their_location(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    good = write_object(log, [change(P, 1, "INSERT", "a")])
    bad = write_object(
        log,
        [change(P, 2, "INSERT", "b")],
        extra_lines=[
            '{"v": 1, "shardId": broken',
            json.dumps({**change(P, 3, "INSERT", "c"), "sequenceNumber": "12a"}),
        ],
    )
    with pytest.raises(BadChangeLogError) as failure:
        run_snapshot(spark, settings)
    message = str(failure.value)
    assert "2 malformed change-log line(s) of 4" in message
    assert f"{bad}:2: not a change-log record" in message
    assert f"{bad}:3: sequenceNumber is not 1 to 40 digits" in message
    assert str(good) not in message
    assert version(settings) is None  # a failed run changes nothing

    result = run_snapshot(spark, settings, tolerate_bad_lines=2)
    assert (result.bad_lines, result.items) == (2, 2)


def test_lines_of_whitespace_are_blank_in_either_mode(spark: SparkSession, tmp_path: Path) -> None:
    """A line of spaces, tabs or a carriage return is no line: a full rebuild (the JSON reader skips
    it) and an incremental run (the text path) count and merge the same."""
    settings = settings_for(tmp_path, tolerate_bad_lines=0)
    log = tmp_path / "changelog"
    write_object(log, [change(P, 1, "INSERT", "a")], extra_lines=["\t", " \t ", "\r", ""])
    built = run_snapshot(spark, settings, full=True)
    assert (built.lines, built.bad_lines, built.items) == (1, 0, 1)
    write_object(log, [change(P, 2, "INSERT", "b")], extra_lines=["\t", "  "])
    merged = run_snapshot(spark, settings)
    assert (merged.lines, merged.bad_lines, merged.items) == (1, 0, 2)


def test_bad_keys_and_unknown_types_are_reported(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path, tolerate_bad_lines=0)
    no_sort_key = change(P, 2, "INSERT", "b")
    del no_sort_key["keys"]["sk"]
    write_object(
        tmp_path / "changelog",
        [
            change(P, 1, "INSERT", "a", image={"x": {"Q": "1"}}),
            no_sort_key,
            change(P, 3, "UPSERT", "c"),
            change(P, 4, "INSERT", "d", image={"n": {"N": "1,5"}}),
        ],
    )
    with pytest.raises(BadChangeLogError) as failure:
        run_snapshot(spark, settings)
    message = str(failure.value)
    assert (
        ":1: newImage has an attribute of no known type, or a number that is not a decimal number" in message
    )
    assert ":2: keys lack 'sk' of type S" in message
    assert ":3: eventName is not INSERT, MODIFY or REMOVE" in message
    assert (
        ":4: newImage has an attribute of no known type, or a number that is not a decimal number" in message
    )


def test_unreadable_object_is_named(spark: SparkSession, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(log, [change(P, 1, "INSERT", "a")])
    broken = log / P / f"{2:040d}-{3:040d}.jsonl.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00 this is not gzip data at all" * 20)
    with pytest.raises(BadChangeLogError) as failure:
        run_snapshot(spark, settings)
    assert "unreadable change-log object" in str(failure.value)
    assert broken.name in str(failure.value)
    assert version(settings) is None


def test_failed_write_leaves_the_snapshot_on_the_previous_version(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(log, [change(P, 1, "INSERT", "a")])
    run_snapshot(spark, settings)
    write_object(log, [change(P, 2, "INSERT", "b")])

    from pipeline import snapshot

    def broken_write(state: DataFrame, uri: str, keys: KeySchema) -> None:
        Path(uri).mkdir(parents=True)
        (Path(uri) / "half-written.parquet").write_bytes(b"PAR1")
        raise RuntimeError("disk full")

    monkeypatch.setattr(snapshot, "write_parts", broken_write)
    with pytest.raises(RuntimeError):
        run_snapshot(spark, settings)
    assert version(settings) == "000001"
    assert_frames_equal(current(spark, settings), expect(spark, [item("a")]))
    assert not list((tmp_path / "snapshot" / "warehouse").rglob("half-written.parquet"))
    monkeypatch.undo()
    assert run_snapshot(spark, settings).version == "000002"
    assert_frames_equal(current(spark, settings), expect(spark, [item("a"), item("b")]))


def test_a_run_rewrites_only_the_buckets_of_changed_keys(spark: SparkSession, tmp_path: Path) -> None:
    # Every changed bucket rewritten whole (copy-on-write); patching is tests/pipeline/test_position_deletes.py.
    settings = settings_for(tmp_path, rewrite_deleted_share=0.01)
    log = tmp_path / "changelog"
    write_object(log, [change(P, i, "INSERT", f"k{i}", image={"n": {"N": str(i)}}) for i in range(1, 41)])
    first = run_snapshot(spark, settings, buckets=8)
    tables = snapshot_tables(settings)
    before = set(tables.data_files(tables.items_name))
    assert first.buckets_changed is None and len(before) == 8  # 40 keys fill every bucket

    write_object(log, [change(P, 50, "MODIFY", "k7", image={"n": {"N": "70"}})])
    second = run_snapshot(spark, settings)
    after = set(tables.data_files(tables.items_name))
    assert second.buckets_changed == 1 and second.buckets_patched == 0 and second.new_changes == 1
    assert len(before - after) == 1 and len(after - before) == 1  # one file replaced, seven kept
    rows = {r["pk"]: r[ITEM_COLUMN]["n"]["n"] for r in read_snapshot(spark, settings).collect()}
    assert rows == {**{f"k{i}": str(i) for i in range(1, 41)}, "k7": "70"}


def test_a_rebuild_keeps_the_same_rows_whether_it_counts_copies_or_not(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A rebuild merges with a window when the listing rules copies out (``copies=False``) and with
    an aggregation that counts each key's distinct changes otherwise: the same winner per key either
    way (sequence number, then shard id, then the latest landing), over a bootstrap's base as well."""
    keys = KeySchema.of(settings_for(tmp_path).table)
    lines = [
        change(P, 5, "INSERT", "tie", image={"w": {"S": "parent"}}),
        change(C1, 5, "INSERT", "tie", image={"w": {"S": "child"}}),  # same number: the higher shard id
        change(P, 6, "MODIFY", "copy", image={"w": {"S": "first landing"}}, landed=T0 + 1),
        change(P, 6, "MODIFY", "copy", image={"w": {"S": "second landing"}}, landed=T0 + 2),
        change(P, 7, "INSERT", "gone"),
        change(P, 8, "REMOVE", "gone"),
        change(P, 9, "MODIFY", "based", image={"w": {"N": "2"}}),
    ]
    raw = spark.createDataFrame(
        [(json.dumps(line), "log", position) for position, line in enumerate(lines)], RAW_LINES
    )
    changes = parse.valid_changes(parse.parse_lines(raw, keys, typed=False), keys).withColumn(
        BUCKET, F.lit(0)
    )
    changes = changes.withColumn(snapshot.NEW, F.lit(True))
    base_rows = [
        ("based", "a", {"pk": s_attr("based"), "sk": s_attr("a"), "w": n_attr("1")}),
        ("kept", "a", {"pk": s_attr("kept"), "sk": s_attr("a"), "w": n_attr("1")}),
    ]
    base = spark.createDataFrame(
        [(*row, "export", "0" * 40, "INSERT", 1.0, None, 0) for row in base_rows], stored_schema(keys)
    )
    view = ["pk", "sk", ITEM_COLUMN, EVENT, SHARD_ID]
    counted = snapshot.rebuild(changes, keys, base, buckets=1, copies=True)
    windowed = snapshot.rebuild(changes, keys, base, buckets=1, copies=False)
    assert snapshot.CHANGES not in windowed.columns
    assert counted.agg(F.sum(snapshot.CHANGES)).first()[0] == 6  # the two landings are one change
    assert_frames_equal(windowed.select(*view), counted.select(*view))
    won = {row["pk"]: row for row in windowed.select(*view).collect()}
    assert won["tie"][SHARD_ID] == C1 and won["tie"][ITEM_COLUMN]["w"]["s"] == "child"
    assert won["copy"][ITEM_COLUMN]["w"]["s"] == "second landing"
    assert won["gone"][EVENT] == "REMOVE" and won["gone"][ITEM_COLUMN] is None
    assert won["based"][ITEM_COLUMN]["w"]["n"] == "2"
    assert won["kept"][ITEM_COLUMN]["w"]["n"] == "1" and won["kept"][SHARD_ID] == "export"

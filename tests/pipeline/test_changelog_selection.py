"""Which objects a run reads (pure, no Spark)."""

from __future__ import annotations

from pipeline.changelog import ChangeLogObject, select_objects


def name(shard: str, first: int, last: int) -> str:
    return f"s3://bucket/changes/{shard}/{first:040d}-{last:040d}.jsonl.gz"


def test_objects_at_or_below_the_watermark_are_skipped() -> None:
    files = [
        name("s1", 1, 10),
        name("s1", 11, 20),
        name("s1", 15, 30),
        name("s2", 5, 6),
        "s3://bucket/changes/README.txt",
    ]
    selection = select_objects(files, {"s1": f"{20:040d}"})
    assert [o.uri for o in selection.to_read] == [name("s1", 15, 30), name("s2", 5, 6)]
    assert selection.already_merged == 2
    assert selection.ignored == ("s3://bucket/changes/README.txt",)


def test_unconventional_names_are_read_in_full() -> None:
    odd = "/data/changes/s1/batch-7.jsonl.gz"
    selection = select_objects([odd], {"s1": f"{99:040d}"})
    assert selection.unconventional == (odd,)
    assert [o.uri for o in selection.to_read] == [odd]


def test_object_names_parse_shard_and_range() -> None:
    obj = ChangeLogObject.of(name("shardId-00000001700000000000-0a1b2c3d", 7, 9))
    assert (obj.shard_id, obj.first, obj.last) == (
        "shardId-00000001700000000000-0a1b2c3d",
        f"{7:040d}",
        f"{9:040d}",
    )

"""Which objects a run reads (pure, no Spark)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.processing.api import Batch
from consumer.records import ShardInfo
from consumer.sinks import changelog as sink
from consumer.sinks.changelog import lane_prefix, object_name
from pipeline.changelog import LANE_MARK, ChangeLogObject, may_hold_copies, select_objects


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


# --- may_hold_copies: can one change be in two objects? (the rebuild then counts per key) ---


def sink_name(shard: str, first: int, last: int, lane: int = 0, lanes: int = 1) -> str:
    """An object's name exactly as the changelog sink writes it (folder per shard or per lane)."""
    folder = lane_prefix(Batch(shard=ShardInfo(shard), records=(), lane=lane, lanes=lanes))
    return f"s3://bucket/changes/{object_name(folder, str(first), str(last))}"


def objects(*names: str) -> list[ChangeLogObject]:
    return [ChangeLogObject.of(n) for n in names]


def test_the_pipeline_reads_lane_folders_as_the_sink_names_them() -> None:
    assert LANE_MARK == sink.LANE_MARK


def test_disjoint_ranges_per_shard_hold_no_copies() -> None:
    assert not may_hold_copies(
        objects(
            sink_name("s1", 1, 10), sink_name("s1", 11, 20), sink_name("s2", 5, 30), sink_name("s3", 5, 30)
        )
    )
    assert not may_hold_copies([])


def test_overlapping_or_touching_ranges_of_one_shard_may_hold_copies() -> None:
    assert may_hold_copies(objects(sink_name("s1", 1, 10), sink_name("s1", 5, 20)))  # a replay cut otherwise
    assert may_hold_copies(objects(sink_name("s1", 1, 10), sink_name("s1", 10, 20)))  # one change shared
    assert may_hold_copies(
        objects(sink_name("s1", 1, 100), sink_name("s1", 40, 60), sink_name("s1", 200, 300))
    )


def test_lanes_of_one_layout_interleave_without_copies_but_two_layouts_may_not() -> None:
    one_layout = objects(sink_name("s1", 1, 50, lane=0, lanes=2), sink_name("s1", 2, 49, lane=1, lanes=2))
    assert not may_hold_copies(one_layout)
    # A replay with another parallelization_factor, or after it was turned off: other folders, copies.
    assert may_hold_copies([*one_layout, *objects(sink_name("s1", 1, 50, lane=3, lanes=4))])
    assert may_hold_copies([*one_layout, *objects(sink_name("s1", 60, 70))])
    # One lane's folder follows the serial rule.
    assert may_hold_copies(
        objects(sink_name("s1", 1, 50, lane=1, lanes=2), sink_name("s1", 40, 60, lane=1, lanes=2))
    )


def test_an_object_whose_name_says_nothing_of_its_range_may_hold_copies() -> None:
    assert may_hold_copies(objects(sink_name("s1", 1, 10), "/data/changes/s1/batch-7.jsonl.gz"))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["s1", "s2"]), st.integers(0, 40), st.integers(0, 6), st.integers(0, 2**16)
        ),
        max_size=8,
    )
)
def test_no_copies_said_means_no_change_is_in_two_objects(
    drawn: list[tuple[str, int, int, int]],
) -> None:
    """Objects as the sink makes them (its first and last changes, some of those between), from
    replays cut anywhere: whenever the rule says no copies, no (shard, sequence number) repeats."""
    contents: dict[str, set[tuple[str, int]]] = {}
    for shard, first, width, pick in drawn:
        last = first + width
        inside = {first, last} | {n for n in range(first + 1, last) if pick >> (n - first) & 1}
        contents[sink_name(shard, first, last)] = {(shard, n) for n in inside}  # a replay: same name
    if not may_hold_copies(objects(*contents)):
        every = [change for held in contents.values() for change in held]
        assert len(every) == len(set(every))


def test_a_reloads_objects_are_no_changes_to_merge() -> None:
    """The sink lands reloads under _reloads/ (pipeline/reloads.py takes them as a base)."""
    assert sink.RELOADS == "_reloads"
    files = [
        name("s1", 1, 10),
        f"s3://bucket/changes/{sink.RELOADS}/0001-s1/{1:040d}-{4:040d}.jsonl.gz",
        f"s3://bucket/changes/{sink.RELOADS}/0001-s1/end.json",
    ]
    selection = select_objects(files, {})
    assert [o.uri for o in selection.to_read] == [name("s1", 1, 10)]
    assert selection.ignored == () and selection.unconventional == ()

"""The rewrite-or-patch decision of an incremental run, as properties over any bucket holdings."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from pipeline.layout import BucketFiles, bucket_files, plan_buckets, pressure
from pipeline.table import FileTask


@st.composite
def holdings(draw: st.DrawFn) -> BucketFiles:
    rows = draw(st.integers(0, 10_000))
    return BucketFiles(
        rows=rows,
        deleted=draw(st.integers(0, rows)),
        files=draw(st.integers(0 if rows == 0 else 1, 40)),
        delete_files=draw(st.integers(0, 40)),
    )


buckets = st.integers(0, 63)


@given(
    held=st.dictionaries(buckets, holdings()),
    changed=st.dictionaries(buckets, st.integers(1, 5_000), min_size=1),
    share=st.floats(0.01, 1.0),
    max_files=st.integers(8, 64),
)
def test_a_bucket_is_patched_only_below_its_limits_and_early_rewrites_are_few(
    held: dict[int, BucketFiles], changed: dict[int, int], share: float, max_files: int
) -> None:
    plan = plan_buckets(held, changed, rewrite_deleted_share=share, max_files_per_bucket=max_files)
    assert plan.rewrite | plan.patch == set(changed) and not plan.rewrite & plan.patch

    def level(bucket: int) -> float:
        files = held.get(bucket)
        if files is None or files.live <= 0:
            return 2.0
        return pressure(files, changed[bucket], rewrite_deleted_share=share, max_files_per_bucket=max_files)

    forced = {b for b in changed if level(b) >= 1}
    assert forced <= plan.rewrite  # a patch never takes a bucket past a limit
    early = plan.rewrite - forced
    assert all(level(b) >= 0.5 for b in early)
    assert len(early) <= max(0, -(-len(changed) // 8) - len(forced))
    if early:  # the most pressed go first
        assert min(level(b) for b in early) >= max((level(b) for b in plan.patch), default=0)


def test_dense_changes_rewrite_and_sparse_ones_patch() -> None:
    held = {0: BucketFiles(rows=625, files=1), 1: BucketFiles(rows=62_500, files=4)}
    plan = plan_buckets(held, {0: 625, 1: 625, 2: 3}, rewrite_deleted_share=0.2, max_files_per_bucket=40)
    assert plan.rewrite == {0, 2} and plan.patch == {1}  # 2: a bucket the table does not hold yet


def test_buckets_changed_at_one_pace_are_rewritten_in_different_runs() -> None:
    """16 buckets of 62 500 rows, 625 changes each per run, for 200 runs: rewrites spread out."""
    held = {b: BucketFiles(rows=62_500, files=8) for b in range(16)}
    per_run: list[int] = []
    for _ in range(200):
        plan = plan_buckets(
            held, dict.fromkeys(held, 625), rewrite_deleted_share=0.2, max_files_per_bucket=40
        )
        for b in plan.rewrite:
            held[b] = BucketFiles(rows=62_500, files=2)
        for b in plan.patch:
            was = held[b]
            held[b] = BucketFiles(was.rows + 625, was.deleted + 625, was.files + 2, was.delete_files + 2)
        per_run.append(len(plan.rewrite))
    steady = per_run[50:]
    assert max(steady) <= 4, Counter(steady)  # never the whole table in one run
    assert 0.5 <= sum(steady) / len(steady) <= 3  # yet every bucket is rewritten now and then


def test_one_delete_file_serving_several_data_files_is_counted_once() -> None:
    tasks = [
        FileTask("a", 3, 100, (("d1", 7),)),
        FileTask("b", 3, 50, (("d1", 7), ("d2", 2))),
        FileTask("c", 4, 10),
    ]
    assert bucket_files(tasks) == {3: BucketFiles(150, 9, 2, 2), 4: BucketFiles(10, 0, 1, 0)}

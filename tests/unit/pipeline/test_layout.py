"""The rewrite-or-patch decision of an incremental run, as properties over any bucket holdings."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from pipeline.layout import (
    EARLY_FROM,
    EARLY_MARGIN,
    BucketFiles,
    bucket_files,
    early_budget,
    pace,
    plan_buckets,
    pressure,
)
from pipeline.stored import FileTask


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
    run=st.integers(0, 10_000),
)
def test_a_bucket_is_patched_only_below_its_limits_and_early_rewrites_keep_to_the_pace(
    held: dict[int, BucketFiles], changed: dict[int, int], share: float, max_files: int, run: int
) -> None:
    plan = plan_buckets(held, changed, rewrite_deleted_share=share, max_files_per_bucket=max_files, run=run)
    assert plan.rewrite | plan.patch == set(changed) and not plan.rewrite & plan.patch

    def new(bucket: int) -> bool:
        files = held.get(bucket)
        return files is None or files.live <= 0

    def level(bucket: int) -> float:
        if new(bucket):
            return 2.0
        return pressure(
            held[bucket], changed[bucket], rewrite_deleted_share=share, max_files_per_bucket=max_files
        )

    forced = {b for b in changed if level(b) >= 1}
    assert forced <= plan.rewrite  # a patch never takes a bucket past a limit
    early = plan.rewrite - forced
    rate = sum(
        EARLY_MARGIN * pace(held[b], changed[b], rewrite_deleted_share=share, max_files_per_bucket=max_files)
        for b in changed
        if not new(b)
    )
    assert len(early) <= max(0, early_budget(rate, run) - len(forced))
    assert all(level(b) >= EARLY_FROM for b in early)
    if early:  # the most pressed go first
        assert min(level(b) for b in early) >= max((level(b) for b in plan.patch), default=0)


@given(rate=st.floats(0, 20), start=st.integers(0, 10_000), runs=st.integers(0, 500))
def test_the_early_budget_adds_up_to_the_rate_over_any_runs(rate: float, start: int, runs: int) -> None:
    total = sum(early_budget(rate, run) for run in range(start, start + runs))
    assert all(early_budget(rate, run) >= 0 for run in range(start, start + runs))
    assert rate * runs - 1 <= total <= rate * runs + 1


def test_dense_changes_rewrite_and_sparse_ones_patch() -> None:
    held = {0: BucketFiles(rows=625, files=1), 1: BucketFiles(rows=62_500, files=4)}
    plan = plan_buckets(held, {0: 625, 1: 625, 2: 3}, rewrite_deleted_share=0.2, max_files_per_bucket=40)
    assert plan.rewrite == {0, 2} and plan.patch == {1}  # 2: a bucket the table does not hold yet


def simulate(runs: int, changes: int = 625, rows: int = 62_500, buckets: int = 16) -> list[int]:
    """One table's buckets of ``rows`` rows after a full rebuild, each changed ``changes`` times per
    run (a tenth of the changes insert, the rest replace a row); a patch adds a data file and folds
    its delete files into one. The number of buckets rewritten in each run."""
    held = {b: BucketFiles(rows=rows, files=1) for b in range(buckets)}
    per_run: list[int] = []
    for run in range(1, runs + 1):
        plan = plan_buckets(
            held, dict.fromkeys(held, changes), rewrite_deleted_share=0.2, max_files_per_bucket=40, run=run
        )
        for b in plan.rewrite:
            held[b] = BucketFiles(rows=held[b].live + changes // 10, files=1)
        for b in plan.patch:
            was = held[b]
            held[b] = BucketFiles(was.rows + changes, was.deleted + changes * 9 // 10, was.files + 1, 1)
        per_run.append(len(plan.rewrite))
    return per_run


def test_buckets_changed_at_one_pace_are_rewritten_one_or_two_a_run() -> None:
    """16 buckets of 62 500 rows, 625 changes each per run (the bench's 10 000 changes into 1 M
    items), for 300 runs: a bucket reaches its limits every ~20 runs, so the table needs ~0.8
    rewrites a run; they come at that pace from the first runs on, never all in one run."""
    per_run = simulate(300)
    assert max(per_run) <= 2, Counter(per_run)
    assert 0.8 <= sum(per_run) / len(per_run) <= 0.8 * EARLY_MARGIN + 0.05, Counter(per_run)
    assert sum(per_run[:20]) >= 10  # staggered from the start, not left to pile up


def test_one_delete_file_serving_several_data_files_is_counted_once() -> None:
    tasks = [
        FileTask("a", 3, 100, (("d1", 7),)),
        FileTask("b", 3, 50, (("d1", 7), ("d2", 2))),
        FileTask("c", 4, 10),
    ]
    assert bucket_files(tasks) == {3: BucketFiles(150, 9, 2, 2), 4: BucketFiles(10, 0, 1, 0)}

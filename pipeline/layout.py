"""Which buckets of a table an incremental run rewrites whole and which it only patches: a pure
decision, taken for each of the two tables (items, tombstones) on its own files.

A bucket is patched (merge-on-read) when few of its rows change: the old rows of the changed keys are
named in a position delete file and the new rows go to a small new data file, so the run costs the
changes, not the bucket. Patches accumulate — readers pay for every deleted row and every file — so a
bucket's *pressure* is the larger of two fractions it would reach with this run's patch:

* the rows deleted, of ``rewrite_deleted_share`` of its rows;
* its files (data and delete files), of ``max_files_per_bucket``.

At pressure 1 the bucket is rewritten whole (copy-on-write, its deletes folded in): dense changes
and small tables get there at once, where a rewrite costs about what a patch does. That is why the
decision is per table: a table's tombstones are usually few, so their buckets are rewritten every run
(one small file each) while the items' buckets are patched; decided for both tables together, the
tombstones would add a tiny file per bucket and run, half of every patched bucket's files.

Buckets changed at one pace (keys spread evenly, as DynamoDB's own hashing spreads them) would all
get to their limits in the same run, so runs also rewrite buckets ahead of need (once past a quarter
of a limit, so that a bucket just rewritten is left alone), most pressed first, at a steady *rate*:
the pressure a run adds to the buckets it changes, summed, is how many buckets' worth of limits it
uses up, so rewriting that many buckets per run (with a quarter more for margin) keeps pace in the
long run. The rate is fractional, so run ``n`` rewrites ``floor((n+1)·rate) − floor(n·rate)``
buckets (those at their limits included): over many runs the same number as a budget carried from
run to run, with no state to keep but the run's number. Buckets then reach their rewrites
staggered, one or two a run, not all in one.
A bucket the table does not hold yet is "rewritten" too: there is nothing to patch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pipeline.stored import FileTask


@dataclass(frozen=True)
class BucketFiles:
    """What a table holds in one bucket."""

    rows: int = 0  # records in its data files
    deleted: int = 0  # of those, rows deleted by position deletes
    files: int = 0  # data files
    delete_files: int = 0

    @property
    def live(self) -> int:
        return self.rows - self.deleted


def bucket_files(tasks: Iterable[FileTask]) -> dict[int, BucketFiles]:
    """Per bucket, the totals of :class:`BucketFiles` over a table's scan tasks."""
    rows: dict[int, int] = {}
    files: dict[int, int] = {}
    deletes: dict[int, dict[str, int]] = {}
    for task in tasks:
        rows[task.bucket] = rows.get(task.bucket, 0) + task.rows
        files[task.bucket] = files.get(task.bucket, 0) + 1
        deletes.setdefault(task.bucket, {}).update(task.deletes)  # one delete file may serve many
    return {
        bucket: BucketFiles(rows[bucket], sum(deletes[bucket].values()), files[bucket], len(deletes[bucket]))
        for bucket in rows
    }


@dataclass(frozen=True)
class Plan:
    rewrite: frozenset[int]
    patch: frozenset[int]


# A patch adds a data file; its delete file replaces the bucket's older ones (folded).
_FILES_PER_PATCH = 1
_DELETE_FILES_AFTER_PATCH = 1
EARLY_MARGIN = 1.25  # early rewrites run this much ahead of the pace the changes set
EARLY_FROM = 0.25  # the least pressure at which a bucket may be rewritten ahead of need


def pressure(
    files: BucketFiles, changes: int, *, rewrite_deleted_share: float, max_files_per_bucket: int
) -> float:
    """How close this run's patch would bring a bucket to its limits (1: at them)."""
    # A patch deletes at most one row per change.
    deleted = (files.deleted + changes) / (rewrite_deleted_share * files.rows) if files.rows else 1.0
    count = files.files + _FILES_PER_PATCH + max(files.delete_files, _DELETE_FILES_AFTER_PATCH)
    return max(deleted, count / max_files_per_bucket)


def pace(
    files: BucketFiles, changes: int, *, rewrite_deleted_share: float, max_files_per_bucket: int
) -> float:
    """The pressure one patch like this run's adds to a bucket: the share of its limits it uses up."""
    deleted = changes / (rewrite_deleted_share * files.live) if files.live > 0 else 1.0
    return min(1.0, max(deleted, _FILES_PER_PATCH / max_files_per_bucket))


def early_budget(rate: float, run: int) -> int:
    """Rewrites due at ``rate`` per run in run number ``run``: over any runs, their count is the
    rate times the runs, rounded down, however the runs' rates vary little from run to run."""
    return math.floor((run + 1) * rate) - math.floor(run * rate)


def plan_buckets(
    held: Mapping[int, BucketFiles],
    changed: Mapping[int, int],
    *,
    rewrite_deleted_share: float,
    max_files_per_bucket: int,
    run: int = 0,
) -> Plan:
    """Split the changed buckets (bucket → changes in this run) into rewrite and patch; ``run`` is
    the run's number (the snapshot's version), which spreads the early rewrites over runs."""
    rewrite: set[int] = set()
    waiting: list[tuple[float, int]] = []
    rate = 0.0
    for bucket, changes in changed.items():
        files = held.get(bucket)
        if files is None or files.live <= 0:
            rewrite.add(bucket)
            continue
        share, most = rewrite_deleted_share, max_files_per_bucket
        level = pressure(files, changes, rewrite_deleted_share=share, max_files_per_bucket=most)
        rate += EARLY_MARGIN * pace(files, changes, rewrite_deleted_share=share, max_files_per_bucket=most)
        if level >= 1:
            rewrite.add(bucket)
        elif level >= EARLY_FROM:
            waiting.append((level, bucket))
    budget = max(0, early_budget(rate, run) - len(rewrite))
    rewrite.update(bucket for _, bucket in sorted(waiting, reverse=True)[:budget])
    return Plan(frozenset(rewrite), frozenset(changed) - frozenset(rewrite))

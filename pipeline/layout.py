"""Which buckets an incremental run rewrites whole and which it only patches: a pure decision.

A bucket is patched (merge-on-read) when few of its rows change: the old rows of the changed keys are
named in a position delete file and the new rows go to a small new data file, so the run costs the
changes, not the bucket. Patches accumulate — readers pay for every deleted row and every file — so a
bucket's *pressure* is the larger of two fractions it would reach with this run's patch:

* the rows deleted, of ``rewrite_deleted_share`` of its rows;
* its files (data and delete files, both tables), of ``max_files_per_bucket``.

At pressure 1 the bucket is rewritten whole (copy-on-write, its deletes folded in): dense changes
and small tables get there at once, where a rewrite costs about what a patch does. Buckets changed
at one pace (keys spread evenly, as DynamoDB's own hashing spreads them) would all get there in the
same run, so a run also rewrites, ahead of need, the most pressed of the buckets past one half, one
for every eight buckets it changes: the rewrites are spread over runs, not all paid in one.
A bucket the snapshot does not hold yet is "rewritten" too: there is nothing to patch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pipeline.table import FileTask


@dataclass(frozen=True)
class BucketFiles:
    """What the tables hold in one bucket (both tables together)."""

    rows: int = 0  # records in its data files
    deleted: int = 0  # of those, rows deleted by position deletes
    files: int = 0  # data files
    delete_files: int = 0

    @property
    def live(self) -> int:
        return self.rows - self.deleted


def bucket_files(tasks: Iterable[FileTask]) -> dict[int, BucketFiles]:
    """Per bucket, the totals of :class:`BucketFiles` over the scan tasks of both tables."""
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


def pressure(
    files: BucketFiles, changes: int, *, rewrite_deleted_share: float, max_files_per_bucket: int
) -> float:
    """How close this run's patch would bring a bucket to its limits (1: at them)."""
    # A patch deletes at most one row per change and adds a data and a delete file per table.
    deleted = (files.deleted + changes) / (rewrite_deleted_share * files.rows) if files.rows else 1.0
    return max(deleted, (files.files + files.delete_files + 4) / max_files_per_bucket)


def plan_buckets(
    held: Mapping[int, BucketFiles],
    changed: Mapping[int, int],
    *,
    rewrite_deleted_share: float,
    max_files_per_bucket: int,
) -> Plan:
    """Split the changed buckets (bucket → changes in this run) into rewrite and patch."""
    rewrite: set[int] = set()
    early: list[tuple[float, int]] = []
    for bucket, changes in changed.items():
        files = held.get(bucket)
        if files is None or files.live <= 0:
            rewrite.add(bucket)
            continue
        level = pressure(
            files,
            changes,
            rewrite_deleted_share=rewrite_deleted_share,
            max_files_per_bucket=max_files_per_bucket,
        )
        if level >= 1:
            rewrite.add(bucket)
        elif level >= 0.5:
            early.append((level, bucket))
    budget = max(0, -(-len(changed) // 8) - len(rewrite))
    rewrite.update(bucket for _, bucket in sorted(early, reverse=True)[:budget])
    return Plan(frozenset(rewrite), frozenset(changed) - frozenset(rewrite))

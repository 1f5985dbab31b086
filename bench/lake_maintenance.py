"""The lake table after hundreds of incremental runs with maintenance on, read against a freshly
rebuilt table of the same content; and what a point lookup reads.

Method (one local[2] session, this shared 2-core machine):

1. A table of ``keys`` (50 000) items, built by one run; then ``runs`` (500) incremental runs
   driven by ``follow``'s own loop (``pipeline.follow.follow``, the default policy: a maintenance
   pass every 10 minutes between runs), each merging ``changes`` (500) changes spread uniformly
   over the keys (MODIFY, 10 % REMOVE, INSERT of removed keys), landed as new objects after the
   run before. Every 25 runs the items table's files (data and delete) are counted: how far the
   table drifts between passes.
2. After the last run, the maintenance pass the policy runs next (``pipeline.maintenance.maintain``).
3. The same change log rebuilt from scratch (``run_snapshot(full=True)``) into a second location:
   the same content, laid out fresh.
4. Both tables read whole through PyIceberg (``scan().to_arrow()``, the way a reader without Spark
   reads them), ``repeats`` (7) times, alternating: the files each scan plans (data and delete
   files) and its seconds. Point lookups (``pk = … AND sk = …``) of 200 random keys on each: the
   data files each plans.

Figures: files after / fresh (goal <= 1.2), scan seconds after / fresh (median of the rounds'
ratios, goal <= 1.2), data files a point lookup plans on the maintained table (goal <= 2); stated:
the files before the final pass and the most seen between passes, over the fresh table's.

Run: ``python -m bench.lake_maintenance [--runs 500] [--changes 500] [--keys 50000] [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Ratio, at_most, machine
from bench.keyspace import KeySpace
from bench.lake_freshness import settings_for

LIMITS = (
    "between maintenance passes a table patched every run holds, per key range, its file, the runs' "
    "small patch files and one delete file (pipeline/layout.py rewrites a range at 40 files or 30 % "
    "of its rows deleted): the pass compacts each range back to one file sorted by key."
)


def _files(table: Any) -> int:
    """Data and delete files a full scan of the table's current snapshot opens."""
    tasks = list(table.scan().plan_files())
    return len(tasks) + len({d.file_path for t in tasks for d in t.delete_files})


def _scan_seconds(table: Any) -> float:
    begin = time.perf_counter()
    rows = table.scan().to_arrow()
    elapsed = time.perf_counter() - begin
    assert rows.num_rows > 0
    return elapsed


def _lookup_files(table: Any, keys: list[str]) -> list[int]:
    return [len(list(table.scan(row_filter=f"pk = '{key}' AND sk = 'order'").plan_files())) for key in keys]


def run(runs: int = 500, changes: int = 500, keys: int = 50_000, repeats: int = 7) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    from pipeline.follow import follow
    from pipeline.maintenance import Policy, maintain
    from pipeline.session import build_session
    from pipeline.snapshot_run import run_snapshot, snapshot_tables

    with tempfile.TemporaryDirectory(prefix="lake-maintenance-bench-") as folder:
        root = Path(folder)
        settings = settings_for(root / "followed")
        space = KeySpace(root / "followed" / "changelog", keys)
        spark = build_session("local[2]", "bench-lake-maintenance", shuffle_partitions=4)
        try:
            started = time.perf_counter()
            space.initial()
            run_snapshot(spark, settings)
            tables = snapshot_tables(settings)
            drift: list[int] = []
            committed: list[int] = []

            def next_changes(result: Any) -> None:
                if result.up_to_date:
                    return
                committed.append(1)
                if len(committed) % 25 == 0:
                    table = tables.items_table()
                    drift.append(_files(table))
                if len(committed) <= runs:
                    space.changes(changes)

            space.changes(changes)
            done = follow(
                spark,
                settings,
                stop=lambda: len(committed) > runs,
                tables=tables,
                on_run=next_changes,
                sleep=lambda _: None,
            )
            spent = time.perf_counter() - started
            items = tables.items_table()
            before = _files(items)
            final = maintain(tables, Policy.of(settings.pipeline))
            items = tables.items_table()
            print(
                f"{len(committed)} runs in {spent / 60:.1f} min ({len(done.maintenance)} passes during them, "
                f"{done.retried} reruns); files every 25 runs: {drift}; before the final pass {before}; "
                f"{final.line()}"
            )
            fresh_settings = settings_for(root / "fresh", changelog=root / "followed" / "changelog")
            run_snapshot(spark, fresh_settings, full=True)
            fresh = snapshot_tables(fresh_settings).items_table()
        finally:
            spark.stop()
        assert items is not None and fresh is not None
        rows = items.scan(selected_fields=("pk", "_item")).to_arrow().sort_by("pk")
        again = fresh.scan(selected_fields=("pk", "_item")).to_arrow().sort_by("pk")
        assert rows.equals(again), "the maintained table and the rebuilt one hold different items"
        files = (_files(items), _files(fresh))
        seconds: list[tuple[float, float]] = []
        for _ in range(repeats):
            seconds.append((_scan_seconds(items), _scan_seconds(fresh)))
        picked = random.Random(9).sample(rows.column("pk").to_pylist(), 200)
        lookups, fresh_lookups = _lookup_files(items, picked), _lookup_files(fresh, picked)
    ratios = tuple(a / b for a, b in seen_pairs(seconds))
    print(
        f"files {files[0]} vs {files[1]}; scan seconds medians {statistics.median(a for a, _ in seconds):.3f} vs "
        f"{statistics.median(b for _, b in seconds):.3f}; point lookups plan {statistics.median(lookups)} "
        f"(max {max(lookups)}) vs {statistics.median(fresh_lookups)} (max {max(fresh_lookups)}) files"
    )
    method = (
        f"{runs} incremental runs of {changes:,} changes into {keys:,} items through follow's loop "
        f"(maintenance every 10 min: {len(done.maintenance)} passes during the runs), then the policy's next "
        f"pass; against run_snapshot --full of the same change log into a new table; PyIceberg scan().to_arrow()"
    )
    return [
        at_most(
            "scan_after_500_runs_over_fresh_files",
            (files[0] / files[1],),
            1.2,
            f"{method}: data + delete files planned, {files[0]} vs {files[1]}",
        ),
        at_most(
            "scan_after_500_runs_over_fresh_seconds",
            ratios,
            1.2,
            f"{method}: seconds per whole scan, {repeats} rounds alternating",
        ),
        at_most(
            "point_lookup_files_read",
            tuple(float(f) for f in lookups),
            2,
            "data files a PyIceberg point lookup (pk = ... AND sk = ...) plans on the maintained table, 200 random "
            f"keys (the fresh table: median {statistics.median(fresh_lookups)}, max {max(fresh_lookups)})",
        ),
        Ratio(
            "scan_before_final_pass_over_fresh_files",
            (before / files[1], max(drift, default=before) / files[1]),
            "stated",
            True,
            "the same table's files at the end of the runs, before the final pass, and the most counted "
            "(every 25 runs) between passes, over the fresh table's",
        ),
    ]


def seen_pairs(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return pairs[1:] if len(pairs) > 2 else pairs  # the first round warms PyIceberg's and the OS's caches


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lake_maintenance", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    for ratio in run(args.runs, args.changes, args.keys, args.repeats):
        print(ratio.line(), ratio.spread())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

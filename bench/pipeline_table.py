"""The snapshot job against its floors, and the cost of an incremental run as the snapshot grows.

Method (one local[2] session, one DuckDB connection limited to 2 threads, this shared machine):

1. Full rebuild vs floors, on one change log of N changes (default 1 M; the generator of
   ``bench.spark_snapshot``: 8 shards, objects of 10 000 changes, K = N/5 items, typed images):
   (a) ``run_snapshot(full=True)`` into the tables it built before (as ``--full`` does) — parse and
   validate every line, choose the key ranges from a sample, latest change per key, items and
   tombstones written as Parquet sorted by key, registered in the Iceberg tables, committed;
   (b) the plain PySpark job a Spark user would write for the same table: ``spark.read.text`` +
   ``from_json`` with an explicit schema, the newest change per key by the sequence number cast to
   ``decimal(38,0)`` (compared as an integer), REMOVEs dropped, the new image written as Parquet
   into a new folder and registered as the content of an Iceberg table (PyIceberg ``add_files``,
   the old files out in the same commit) — in both straightforward forms, a ``row_number() = 1``
   window and ``max_by``, and each round the faster of the two is the floor; no validation, no
   bad-line report, no tombstones;
   (c) DuckDB (``read_json`` of the same gzip objects with explicit column types, ``QUALIFY
   row_number()`` by the sequence number as HUGEINT, ``COPY … TO`` Parquet).
   Each is run ``repeats`` (5) times, alternating, after one untimed round of (a) and both (b) on the same
   log (the JVM's compiler needs more than a small log to settle: the first full-size round ran ~25 %
   slower). Five rounds, not three: single rounds' ratios ranged from 1.11 to 1.52 within one run.
2. Incremental cost vs snapshot size: for S in (10 000, 200 000, 1 000 000) items, a snapshot of S
   items is built (one INSERT per key, then ``run_snapshot``) and one untimed incremental run made;
   then, ``incremental_repeats`` (24) times, for each size in turn (interleaved), C = 10 000 changes
   (MODIFY / REMOVE / INSERT of keys drawn uniformly over the snapshot's key space) are landed as new
   objects and one incremental ``run_snapshot`` is timed. Patches accumulate over the rounds, so the
   later ones include rewrites of buckets that reached their limits (pipeline/layout.py).

Ratios: (a)/(b) goal <= 1.3; (a)/(c) stated (no goal); incremental at 1 M items / at 10 000 items,
goal <= 1.5 (the run should cost the changes, not the table): the median of the rounds' ratios, and
the ratio of their totals (which counts every rewrite).

Run: ``python -m bench.pipeline_table [--changes N] [--sizes 10000,200000,1000000] [--repeats R]
[--incremental-repeats R] [--skip-full | --skip-incremental]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from bench.common import Ratio, at_most, machine
from bench.keyspace import KeySpace
from bench.pipeline_floors import MERGES, duckdb_job, plain_job
from bench.spark_snapshot import _settings, generate
from pipeline.session import build_session
from pipeline.snapshot_run import run_snapshot

LIMITS = (
    "full rebuild: one shuffle, by bucket; then, when the objects' names rule out copies of a change "
    "(pipeline/changelog.py), each key's latest row through a row_number() = 1 window that Spark "
    "applies as a group limit on the sort (partitioned by a 64-bit hash of the key first, so the "
    "sort's 8-byte prefix settles its comparisons), the run's change count being the rows merged (otherwise an "
    "object-hash max_by that counts each key's distinct changes, 0.5 to 0.9 task-s dearer); items "
    "are stored in DynamoDB JSON's shape, so typing the winners is a compiled cast (it was an "
    "interpreted transform_values, 0.8 to 2.2 task-s). Stage metrics (task-seconds) put what is left "
    "in the reduce stage and on the driver; the map stages cost the same (17 to 21 task-s, our "
    "validation about what the plain job's partial aggregation costs). Merging, without writing: "
    "3.8 to 4.5 against 1.1 to 1.6, as it merges 1 M unaggregated rows (92 MB shuffled against "
    "37 MB). Writing Parquet costs both jobs about 2 (the item column dominates; our bookkeeping "
    "columns cost nothing measurable); splitting it into 16 buckets of two tables about 1 more. The "
    "driver: about 1.2 s (building the plan 0.5 s, of which 1 600 py4j calls for the parse and its "
    "checks; creating the tables 0.2 s; the Iceberg commit 0.3 s). Tried and no better: narrower "
    "bookkeeping columns, sort-based aggregation, partial aggregation before the bucket shuffle, a "
    "larger object-hash fallback threshold, writing without the planned sort, Parquet dictionary and "
    "codec options, -XX:-DontCompileHugeMethods (docs/pipeline.md). "
    "Incremental: a run still reads the key and order columns of every row of the buckets it "
    "touches (changes spread over all keys touch every bucket); up to 5 M rows (and 5 M changes) the driver does it "
    "with PyArrow (pipeline/locate.py: 1.1 M rows in ~250 files in 0.3 to 0.6 s, where Spark paid "
    "2 to 2.5 ms per small file). Patches accumulate: from about the eighth round on, about two "
    "rounds in three also rewrite one of the 16 items buckets, at the pace the deleted rows set "
    "(pipeline/layout.py); the driver copies its 62 500 kept rows with PyArrow (pipeline/rewrite.py: "
    "about 0.5 to 0.8 s more than a run that only patches, where Spark's read, shuffle and write of "
    "them cost 1.2 to 2.5 s); the median and total over 24 rounds include that steady state."
)
INCREMENT = 10_000
SIZES = (10_000, 200_000, 1_000_000)
BUCKETS = 16


def cpu_seconds(spark: SparkSession) -> float:
    """CPU time of the driver JVM (local mode: every Spark task) plus this process (DuckDB's threads,
    PyIceberg): less sensitive than wall time to the other work on a shared machine."""
    jvm = 0.0
    process = getattr(spark.sparkContext._gateway, "proc", None)  # the JVM this process launched
    if process is not None:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        jvm = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return jvm + time.process_time()


def run(
    changes: int = 1_000_000,
    sizes: tuple[int, ...] = SIZES,
    repeats: int = 5,
    increment: int = INCREMENT,
    incremental_repeats: int = 24,
) -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    ratios: list[Ratio] = []
    with tempfile.TemporaryDirectory(prefix="pipeline-table-bench-") as folder:
        root = Path(folder)
        spark = build_session("local[2]", "bench-pipeline-table", shuffle_partitions=4)
        try:
            ratios += _full_rebuild(spark, root, changes, repeats)
            ratios += _incremental(spark, root, sizes, incremental_repeats, increment)
        finally:
            spark.stop()
    for ratio in ratios:
        print(ratio.line())
    return ratios


def _full_rebuild(spark: SparkSession, root: Path, changes: int, repeats: int) -> list[Ratio]:
    items = max(1, changes // 5)
    started = time.perf_counter()
    objects = generate(root / "full" / "changelog", changes, items)
    files = [str(p) for p in sorted((root / "full" / "changelog").rglob("*.jsonl.gz"))]
    size = sum(Path(f).stat().st_size for f in files)
    print(
        f"full rebuild: {changes:,} changes, {items:,} items, {objects} objects, {size / 2**20:.1f} MiB gzip; "
        f"generated in {time.perf_counter() - started:.1f} s; repeats {repeats}"
    )
    settings = _settings(root / "full")
    catalog = SqlCatalog("plain", uri=f"sqlite:///{root / 'plain.db'}", warehouse=(root / "plain").as_uri())
    rounds = iter(range(1_000_000))

    def plain(merge: str) -> int:
        return plain_job(spark, files, root / "plain" / f"{merge}-{next(rounds)}", catalog, merge=merge)

    run_snapshot(spark, settings, full=True, buckets=BUCKETS)  # the untimed round of each
    for merge in MERGES:
        plain(merge)
    jobs: list[float] = []
    plains: list[float] = []
    by_merge: dict[str, list[float]] = {merge: [] for merge in MERGES}
    ducks: list[float] = []
    cpu: dict[str, list[float]] = {"job": [], "plain": [], "duck": []}
    for _ in range(repeats):
        # A full rebuild replaces the content of the tables it made before (as --full does).
        begin, used = time.perf_counter(), cpu_seconds(spark)
        result = run_snapshot(spark, settings, full=True, buckets=BUCKETS)
        jobs.append(time.perf_counter() - begin)
        cpu["job"].append(cpu_seconds(spark) - used)
        assert result.bad_lines == 0 and result.new_changes == changes, result
        best: tuple[float, float] | None = None
        for merge in MERGES:
            begin, used = time.perf_counter(), cpu_seconds(spark)
            plain_items = plain(merge)
            took = (time.perf_counter() - begin, cpu_seconds(spark) - used)
            by_merge[merge].append(took[0])
            assert plain_items == result.items, (merge, plain_items, result.items)
            best = took if best is None or took[0] < best[0] else best
        assert best is not None
        plains.append(best[0])  # the floor: the faster of the two plain forms in this round
        cpu["plain"].append(best[1])
        begin, used = time.perf_counter(), cpu_seconds(spark)
        duck_items = duckdb_job(files, str(root / "duck.parquet"))
        ducks.append(time.perf_counter() - begin)
        cpu["duck"].append(cpu_seconds(spark) - used)
        assert duck_items == result.items, (duck_items, result.items)
        print(
            f"  snapshot job {jobs[-1]:.1f} s ({result.items:,} items, {result.tombstones:,} tombstones); "
            + ", ".join(f"plain {m} {by_merge[m][-1]:.1f} s" for m in MERGES)
            + f"; DuckDB {ducks[-1]:.1f} s; CPU s: job {cpu['job'][-1]:.1f}, "
            f"plain {cpu['plain'][-1]:.1f}, DuckDB {cpu['duck'][-1]:.1f}"
        )
    over_plain = tuple(j / p for j, p in zip(jobs, plains, strict=True))
    over_duck = tuple(j / d for j, d in zip(jobs, ducks, strict=True))
    throughput = changes / statistics.median(jobs)
    return [
        at_most(
            "full_rebuild_over_plain_spark",
            over_plain,
            1.3,
            f"snapshot --full time (items and tombstones into existing Iceberg tables) / the plain PySpark "
            f"job's (explicit schema, newest change per key by the integer sequence number, REMOVEs dropped, "
            f"Parquet, registered in an Iceberg table with PyIceberg add_files): each round the faster of its "
            f"two forms, same {changes:,} changes, local[2]; {throughput:,.0f} changes/s; medians "
            f"{statistics.median(jobs):.1f} s vs {statistics.median(plains):.1f} s ("
            + ", ".join(f"{m} {statistics.median(t):.1f} s" for m, t in by_merge.items())
            + ")",
        ),
        Ratio(
            "full_rebuild_over_plain_spark_cpu",
            tuple(j / p for j, p in zip(cpu["job"], cpu["plain"], strict=True)),
            "stated",
            True,
            "the same two runs in CPU seconds (driver JVM + this process) instead of wall time: what the "
            "jobs cost with the other load of this shared machine factored out; medians "
            f"{statistics.median(cpu['job']):.1f} vs {statistics.median(cpu['plain']):.1f} CPU s",
        ),
        Ratio(
            "full_rebuild_over_duckdb",
            over_duck,
            "stated",
            True,
            f"snapshot --full time / DuckDB (2 threads) doing the same merge from the same gzip objects "
            f"to Parquet; medians {statistics.median(jobs):.1f} s vs {statistics.median(ducks):.1f} s",
        ),
    ]


def _incremental(
    spark: SparkSession, root: Path, sizes: tuple[int, ...], repeats: int, increment: int
) -> list[Ratio]:
    timings: dict[int, list[float]] = {size: [] for size in sizes}
    cpu: dict[int, list[float]] = {size: [] for size in sizes}
    spaces: dict[int, tuple[KeySpace, Any]] = {}
    for size in sizes:
        base = root / f"incremental-{size}"
        space = KeySpace(base / "changelog", size)
        started = time.perf_counter()
        space.initial()
        settings = _settings(base)
        built = run_snapshot(spark, settings, buckets=BUCKETS)
        space.changes(increment)
        run_snapshot(spark, settings)  # warm-up: the first incremental run of a snapshot is not timed
        print(
            f"incremental: snapshot of {built.items:,} items built in {time.perf_counter() - started:.1f} s "
            f"({BUCKETS} buckets), one untimed incremental run"
        )
        spaces[size] = (space, settings)
    for _ in range(repeats):  # sizes interleaved: the machine's other load falls on all of them alike
        for size, (space, settings) in spaces.items():
            space.changes(increment)
            begin, used = time.perf_counter(), cpu_seconds(spark)
            result = run_snapshot(spark, settings)
            timings[size].append(time.perf_counter() - begin)
            cpu[size].append(cpu_seconds(spark) - used)
            assert result.new_changes == increment and not result.up_to_date, result
            print(
                f"  {increment:,} changes into {size:,} items: {timings[size][-1]:.2f} s "
                f"({cpu[size][-1]:.1f} CPU s), {result.buckets_changed} of {BUCKETS} buckets changed, "
                f"{result.buckets_patched} of them patched"
            )
    for size in sizes:
        shutil.rmtree(root / f"incremental-{size}", ignore_errors=True)
    small, large = min(sizes), max(sizes)
    values = tuple(b / a for a, b in zip(timings[small], timings[large], strict=True))
    figures = "; ".join(f"{s:,} items {statistics.median(t):.2f} s" for s, t in timings.items())
    return [
        at_most(
            "incremental_large_over_small",
            values,
            1.5,
            f"{increment:,} uniformly spread changes into a {large:,}-item snapshot / into a {small:,}-item "
            f"one (incremental run_snapshot, local[2], {BUCKETS} buckets); {figures}",
        ),
        at_most(
            "incremental_large_over_small_total",
            (sum(timings[large]) / sum(timings[small]),),
            1.5,
            "the same runs' total time, large / small: includes the runs that rewrite buckets whose "
            "patches (position deletes, small files) reached their limits, which a median can hide",
        ),
        Ratio(
            "incremental_large_over_small_cpu",
            tuple(b / a for a, b in zip(cpu[small], cpu[large], strict=True)),
            "stated",
            True,
            "the same runs in CPU seconds (driver JVM + this process); "
            + "; ".join(f"{s:,} items {statistics.median(t):.1f} CPU s" for s, t in cpu.items()),
        ),
    ]


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pipeline_table", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--repeats", type=int, default=5, help="full-rebuild rounds (5)")
    parser.add_argument("--incremental-repeats", type=int, default=24, help="incremental rounds (24)")
    parser.add_argument("--increment", type=int, default=INCREMENT)
    parser.add_argument("--skip-full", action="store_true")
    parser.add_argument("--skip-incremental", action="store_true", help="only the full rebuild vs its floors")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    if args.skip_incremental:
        print(f"machine: {machine()}")
        spark = build_session("local[2]", "bench-pipeline-table", shuffle_partitions=4)
        try:
            with tempfile.TemporaryDirectory(prefix="pipeline-table-bench-") as folder:
                for ratio in _full_rebuild(spark, Path(folder), args.changes, args.repeats):
                    print(ratio.line())
        finally:
            spark.stop()
        return 0
    if args.skip_full:
        spark = build_session("local[2]", "bench-pipeline-table", shuffle_partitions=4)
        try:
            with tempfile.TemporaryDirectory(prefix="pipeline-table-bench-") as folder:
                for ratio in _incremental(
                    spark, Path(folder), sizes, args.incremental_repeats, args.increment
                ):
                    print(ratio.line())
        finally:
            spark.stop()
        return 0
    run(args.changes, sizes, args.repeats, args.increment, args.incremental_repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

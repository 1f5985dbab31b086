"""The snapshot job against its floors, and the cost of an incremental run as the snapshot grows.

Method (this shared 2-core machine; Spark local[2], 4 shuffle partitions; DuckDB limited to 2 threads):

1. Full rebuild vs floors, on one change log of N changes (default 1 M; the generator of
   ``bench.spark_snapshot``: 8 shards, objects of 10 000 changes, K = N/5 items, typed images).
   Each job runs in a fresh process (``bench.rebuild_round``: a new interpreter and JVM, as
   ``consumer pipeline snapshot --full`` and a user's ``spark-submit`` both are), timed from the
   moment its session exists, wall and CPU seconds (the JVM + the Python process); each round runs
   every job once, the snapshot job next to the user's job (c), the order reversed every other
   round (ours, user, ..., then ..., user, ours), the 1-minute load average recorded before and
   after each job (the cores are shared):
   (a) ``run_snapshot(full=True)`` into the tables it built before (as ``--full`` does) — parse and
   validate every line, choose the key ranges from a sample, latest change per key, items and
   tombstones written as Parquet sorted by key, registered in the Iceberg tables, committed;
   (b) the bench's plain PySpark job for the same table: ``spark.read.text`` + ``from_json`` with
   an explicit schema, the newest change per key by the sequence number cast to ``decimal(38,0)``
   (compared as an integer), REMOVEs dropped, the new image written as Parquet into a new folder
   and registered as the content of an Iceberg table (PyIceberg ``add_files``, the old files out in
   the same commit) — in both straightforward forms, a ``row_number() = 1`` window and ``max_by``;
   (c) the job a Spark user writes first: ``spark.read.json`` with an explicit schema of the fields
   it needs, the same window, REMOVEs dropped, Parquet out — no table format;
   (d) DuckDB (``read_json`` of the same gzip objects with explicit column types, ``QUALIFY
   row_number()`` by the sequence number as HUGEINT, ``COPY … TO`` Parquet).
   After each round, the output of every Spark floor is compared with the snapshot table's items
   (PyIceberg's scan), key for key and value for value; DuckDB's by its row count. The floor of a
   round is the least of the three Spark jobs' figures (wall and CPU each): none of them validates,
   keeps tombstones, lays out by key range or sorts.
2. Incremental cost vs snapshot size: for S in (10 000, 200 000, 1 000 000) items, a snapshot of S
   items is built (one INSERT per key, then ``run_snapshot``) and one untimed incremental run made;
   then, ``incremental_repeats`` (24) times, for each size in turn (interleaved), C = 10 000 changes
   (MODIFY / REMOVE / INSERT of keys drawn uniformly over the snapshot's key space) are landed as new
   objects and one incremental ``run_snapshot`` is timed. Patches accumulate over the rounds, so the
   later ones include rewrites of buckets that reached their limits (pipeline/layout.py).

Ratios: (a) / the round's floor, wall and CPU, goal <= 1.3 each; (a)/(d) stated (no goal);
incremental at 1 M items / at 10 000 items,
goal <= 1.5 (the run should cost the changes, not the table): the median of the rounds' ratios, and
the ratio of their totals (which counts every rewrite).

Run: ``python -m bench.pipeline_table [--changes N] [--sizes 10000,200000,1000000] [--repeats R]
[--incremental-repeats R] [--skip-full | --skip-incremental]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench.common import Ratio, at_most, in_fresh_process, machine
from bench.keyspace import KeySpace
from bench.pipeline_floors import same_items
from bench.rebuild_round import cpu_seconds
from bench.spark_snapshot import _settings, generate
from pipeline.session import build_session
from pipeline.snapshot_run import run_snapshot, snapshot_tables

LIMITS = (
    "full rebuild (Spark's JSON reader parses each line where it was read), against the user's plain "
    "job, per fresh process from the event log, /proc and the JIT's events (docs/pipeline.md): the "
    "map stage (read, parse, validate, bucket, shuffle write of 1 M rows) 22.4 to 23.0 task-CPU s "
    "against 18.3 to 19.4, which include the plain job's cut of each key to its newest change before "
    "its shuffle (552 k rows); merge and write 11.3 to 11.6 against 5.6 to 6.8 (our merge sorts every "
    "row after the bucket shuffle); HotSpot's compiler threads 21.0 to 21.2 CPU s against 11.4 to "
    "13.3 (2 485 methods compiled against 1 877, the parse and checks' generated code the largest). "
    "Closing it needs less generated code in the parse stage and each key cut to its newest change "
    "before the bucket shuffle. Tried and no better: adaptive execution off, narrower bookkeeping "
    "columns, sort-based aggregation, partial aggregation before the bucket shuffle, a "
    "larger object-hash fallback threshold, writing without the planned sort or the key sort, Parquet dictionary and "
    "codec options, -XX:-DontCompileHugeMethods (docs/pipeline.md). Whole-stage code generation off "
    "took 1 to 2.4 CPU s off at 1 M changes, most of it the JIT's, a cost paid once per JVM, and added "
    "6.5 at 3 M: not kept. The image checks' numbers are cast by one interpreted exists (2.3 CPU s "
    "less than two array_compacts). "
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
        ratios += _full_rebuild(root, changes, repeats)
        spark = build_session("local[2]", "bench-pipeline-table", shuffle_partitions=4)
        try:
            ratios += _incremental(spark, root, sizes, incremental_repeats, increment)
        finally:
            spark.stop()
    for ratio in ratios:
        print(ratio.line())
    return ratios


FLOORS = ("plain-window", "plain-max_by", "user")
# The snapshot job next to the user's job (the floor that has bound in every run so far), the
# order reversed every other round: ours, user, ..., then ..., user, ours, so that the machine's
# other load, which drifts over minutes on these shared cores, falls on both sides of each pair.
KINDS = ("snapshot", "user", "plain-window", "plain-max_by", "duckdb")


def round_order(round_: int) -> tuple[str, ...]:
    return KINDS if round_ % 2 == 0 else tuple(reversed(KINDS))


def load_average() -> float:
    """The machine's 1-minute load average: the other work on the shared cores, said beside each job."""
    try:
        with open("/proc/loadavg", encoding="utf-8") as source:
            return float(source.read().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def _full_rebuild(root: Path, changes: int, repeats: int) -> list[Ratio]:
    items = max(1, changes // 5)
    started = time.perf_counter()
    work = root / "full"
    objects = generate(work / "changelog", changes, items)
    size = sum(p.stat().st_size for p in (work / "changelog").rglob("*.jsonl.gz"))
    print(
        f"full rebuild: {changes:,} changes, {items:,} items, {objects} objects, {size / 2**20:.1f} MiB gzip; "
        f"generated in {time.perf_counter() - started:.1f} s; {repeats} rounds, each job in a fresh process"
    )
    took: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for round_ in range(repeats):
        for kind in round_order(round_):
            before = load_average()
            figures = in_fresh_process("bench.rebuild_round", kind, str(work), timeout=1800)
            took[kind].append({**figures, "load": (before, load_average())})
        job = took["snapshot"][-1]
        if job["changes"] != changes or job["rows"] <= 0:
            raise AssertionError(f"the snapshot job merged {job['changes']} changes of {changes}: {job}")
        table = snapshot_tables(_settings(work)).items_table()
        for kind in FLOORS:
            found = same_items(table, Path(took[kind][-1]["out"]))
            if found != job["rows"] or took[kind][-1]["rows"] != found:
                raise AssertionError(
                    f"{kind}: {took[kind][-1]['rows']} rows, {found} compared, {job['rows']} items"
                )
            shutil.rmtree(took[kind][-1]["out"], ignore_errors=True)
        if took["duckdb"][-1]["rows"] != job["rows"]:
            raise AssertionError(
                f"DuckDB wrote {took['duckdb'][-1]['rows']} rows, the snapshot {job['rows']} items"
            )
        Path(took["duckdb"][-1]["out"]).unlink(missing_ok=True)
        last = {kind: runs[-1] for kind, runs in took.items()}
        print(
            f"  round {round_ + 1} ({' '.join(round_order(round_))}): snapshot job {job['wall']:.1f} s "
            f"({job['rows']:,} items, {job['tombstones']:,} tombstones); "
            + ", ".join(f"{kind} {last[kind]['wall']:.1f} s" for kind in (*FLOORS, "duckdb"))
            + "; CPU s: "
            + ", ".join(f"{kind} {last[kind]['cpu']:.1f}" for kind in KINDS)
            + "; snapshot / floor, wall (CPU): "
            + ", ".join(
                f"{kind} {job['wall'] / last[kind]['wall']:.3f} ({job['cpu'] / last[kind]['cpu']:.3f})"
                for kind in FLOORS
            )
            + "; load average before-after: "
            + ", ".join(f"{kind} {last[kind]['load'][0]:.2f}-{last[kind]['load'][1]:.2f}" for kind in KINDS)
            + "; each Spark floor's output holds the snapshot's items, value for value",
            flush=True,
        )
    wall = {kind: [t["wall"] for t in runs] for kind, runs in took.items()}
    cpu = {kind: [t["cpu"] for t in runs] for kind, runs in took.items()}
    rows = took["snapshot"][-1]["rows"]

    def over(figures: dict[str, list[float]]) -> tuple[tuple[float, ...], str]:
        """The snapshot job over the stricter floor of each round (the least of the three Spark
        floors), and a sentence with its min / median / max over each floor (round by round) and the
        jobs' medians."""
        job = figures["snapshot"]
        strict = [min(values) for values in zip(*(figures[kind] for kind in FLOORS), strict=True)]

        def spread(kind: str) -> str:
            pairs = [j / f for j, f in zip(job, figures[kind], strict=True)]
            return f"{min(pairs):.3f} / {statistics.median(pairs):.3f} / {max(pairs):.3f}"

        each = ", ".join(f"{kind} {spread(kind)}" for kind in FLOORS)
        medians = ", ".join(
            f"{kind} {statistics.median(figures[kind]):.1f}" for kind in ("snapshot", *FLOORS)
        )
        return tuple(
            j / f for j, f in zip(job, strict, strict=True)
        ), f"over each floor: {each}; medians {medians}"

    by_wall, wall_text = over(wall)
    by_cpu, cpu_text = over(cpu)
    throughput = changes / statistics.median(wall["snapshot"])
    floors = (
        "the floors: the bench's plain job (spark.read.text + from_json with the change log's schema, each "
        "key's newest change by the sequence number as decimal(38,0) through a row_number() = 1 window "
        "(plain-window) or max_by (plain-max_by), REMOVEs dropped, Parquet registered as an Iceberg "
        "table's content with PyIceberg add_files) and a user's job (spark.read.json with an explicit "
        "schema of the fields it needs, the same window, REMOVEs dropped, Parquet)"
    )
    return [
        at_most(
            "full_rebuild_over_plain_spark",
            by_wall,
            1.3,
            f"snapshot --full wall time (parse and validate every line, items and tombstones by key range, "
            f"each file sorted by key, committed to two Iceberg tables) / the least of the three Spark "
            f"floors' in the same round; each job in a fresh process (local[2], 4 shuffle partitions), "
            f"the snapshot job and the user's next to each other, order reversed every other round, "
            f"{repeats} rounds, {changes:,} changes; every floor's output checked "
            f"to hold the snapshot's {rows:,} items value for value; {floors}; {wall_text} s; "
            f"{throughput:,.0f} changes/s",
        ),
        at_most(
            "full_rebuild_over_plain_spark_cpu",
            by_cpu,
            1.3,
            f"the same rounds in CPU seconds (the job's JVM + its Python process; the cheapest floor of "
            f"each round): what the jobs cost with the machine's other load factored out; {cpu_text} CPU s",
        ),
        Ratio(
            "full_rebuild_over_duckdb",
            tuple(j / d for j, d in zip(wall["snapshot"], wall["duckdb"], strict=True)),
            "stated",
            True,
            f"snapshot --full wall time / DuckDB's (2 threads, fresh process) doing the same merge from "
            f"the same gzip objects to Parquet (row count checked); medians "
            f"{statistics.median(wall['snapshot']):.1f} s vs {statistics.median(wall['duckdb']):.1f} s",
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
        with tempfile.TemporaryDirectory(prefix="pipeline-table-bench-") as folder:
            for ratio in _full_rebuild(Path(folder), args.changes, args.repeats):
                print(ratio.line(), ratio.spread())
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

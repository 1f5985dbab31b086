"""One timed full rebuild, or one of its floors, in a fresh process (bench/pipeline_table.py).

Run as ``python -m bench.rebuild_round KIND WORK``: a new interpreter and, for the Spark kinds, a
new local[2] JVM (:func:`pipeline.session.build_session`, the same session for every kind), nothing
run in it before; then one timed job over the gzip change-log objects under ``WORK/changelog``:

* ``snapshot``: ``run_snapshot(full=True)`` into the tables under ``WORK/snapshot`` (a ``--full``
  rebuild: what the tables held before is replaced);
* ``plain-window`` / ``plain-max_by``: the bench's plain job (:func:`bench.pipeline_floors.plain_job`);
* ``user``: the job a Spark user writes first (:func:`bench.pipeline_floors.user_job`);
* ``duckdb``: DuckDB's merge (:func:`bench.pipeline_floors.duckdb_job`), no JVM.

It prints one JSON line: wall seconds, CPU seconds (the JVM this process started, which runs every
Spark task in local mode, plus this process: PyIceberg, DuckDB's threads), the rows the result
holds (counted after the clock stopped) and where the output is. A fresh process per job because a
rebuild is a job of its own: ``consumer pipeline snapshot --full`` starts a JVM, and so does a
user's ``spark-submit``; each then pays the JIT compiler's warm-up alike.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

KINDS = ("snapshot", "plain-window", "plain-max_by", "user", "duckdb")


def cpu_seconds(spark: SparkSession) -> float:
    """CPU time of the driver JVM (local mode: every Spark task) plus this process (DuckDB's threads,
    PyIceberg): less sensitive than wall time to the other work on a shared machine."""
    jvm = 0.0
    process = getattr(spark.sparkContext._gateway, "proc", None)  # the JVM this process launched
    if process is not None:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        jvm = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return jvm + time.process_time()


def measure(kind: str, work: Path) -> dict[str, Any]:
    from bench.pipeline_floors import duckdb_job, parquet_rows, plain_job, user_job
    from bench.spark_snapshot import _settings
    from pipeline.session import build_session

    files = [str(p) for p in sorted((work / "changelog").rglob("*.jsonl.gz"))]
    out = work / "out" / f"{kind}-{uuid.uuid4().hex[:8]}"
    if kind == "duckdb":
        begin, used = time.perf_counter(), time.process_time()
        rows = duckdb_job(files, str(out) + ".parquet")
        wall, cpu = time.perf_counter() - begin, time.process_time() - used
        return {"wall": wall, "cpu": cpu, "rows": rows, "out": str(out) + ".parquet"}
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
    from pyiceberg.catalog.sql import SqlCatalog

    from pipeline.snapshot_run import run_snapshot

    settings = _settings(work)
    catalog = SqlCatalog("plain", uri=f"sqlite:///{work / 'plain.db'}", warehouse=(work / "plain").as_uri())
    extra: dict[str, Any] = {}
    spark = build_session("local[2]", f"bench-rebuild-{kind}", shuffle_partitions=4)
    try:
        begin, used = time.perf_counter(), cpu_seconds(spark)
        if kind == "snapshot":
            result = run_snapshot(spark, settings, full=True)
        elif kind == "user":
            user_job(spark, files, out)
        else:
            plain_job(spark, files, out, catalog, merge=kind.removeprefix("plain-"))
        wall, cpu = time.perf_counter() - begin, cpu_seconds(spark) - used
    finally:
        spark.stop()
    if kind == "snapshot":
        if result.bad_lines:
            raise AssertionError(f"the bench's log has no bad line, the run found {result.bad_lines}")
        rows = result.items
        extra = {"tombstones": result.tombstones, "changes": result.new_changes}
    else:
        rows = parquet_rows(out)
    return {"wall": wall, "cpu": cpu, "rows": rows, "out": str(out), **extra}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in KINDS:
        print(f"usage: python -m bench.rebuild_round {{{'|'.join(KINDS)}}} WORK", file=sys.stderr)
        return 2
    print(json.dumps(measure(args[0], Path(args[1]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

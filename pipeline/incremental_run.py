"""An incremental run: the changes since the table's watermarks, merged into the buckets they touch.

Every changed key is first located among the touched buckets' live rows (only the columns that
order changes are read): on the driver if the buckets hold at most ``driver_rows`` rows and the run
at most as many changes (:mod:`pipeline.locate`), by Spark otherwise. It is then merged with its new
changes (:func:`pipeline.patch.patch`): that says which rows a winning change replaces and what it
writes. Then, per bucket of each table (:func:`pipeline.layout.plan_buckets`), a patched bucket gets
the new rows in a new file and position deletes for the replaced ones; a rewritten bucket is copied
without the replaced rows (and its older deletes) and written again with the new rows, by the
driver when its rows are few (:mod:`pipeline.rewrite`), else by Spark.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline import locate, parse, patch, rewrite, snapshot
from pipeline.errors import SnapshotStoreError
from pipeline.layout import Plan, bucket_files, plan_buckets
from pipeline.log_lines import read_lines, reading, report_bad_lines
from pipeline.ranges import KeyRanges
from pipeline.reading import FILE, POS, read_live, small_frame, to_arrow
from pipeline.run_plan import Outcome, RunContext, RunPlan, new_changes, with_bucket
from pipeline.schemas import CREATED
from pipeline.storage import join
from pipeline.stored import BUCKET, FileTask, arrow_schema, stored_schema
from pipeline.table import SnapshotTables, as_file_uri

KINDS = ("items", "tombstones")


def plan(run: RunContext, layout: KeyRanges, driver_rows: int = locate.DRIVER_ROWS) -> RunPlan:
    """The run's new rows and what it deletes; the changes are few, so they are parsed once, kept,
    and counted per bucket (which also says which buckets the run touches)."""
    keys = run.keys
    raw = read_lines(run.spark, [o.uri for o in run.selection.to_read])
    # The parse is kept and the bucket computed over it: in one stage with the parse, the key-range
    # tree took the generated method past the size the JVM compiles, and every line ran interpreted
    # (tests/pipeline/test_generated_code.py).
    kept = parse.parse_lines(raw, keys, typed=True).persist(StorageLevel.MEMORY_AND_DISK)
    parsed = with_bucket(kept, keys, layout)
    try:
        counts = reading(
            lambda: (
                parsed.groupBy(F.col("_problem").isNotNull().alias("bad"), BUCKET)
                .agg(F.count(F.lit(1)).alias("count"), F.min(CREATED).alias("oldest"))
                .collect()
            )
        )
        bad = sum(int(r["count"]) for r in counts if r["bad"])
        lines = sum(int(r["count"]) for r in counts)
        report_bad_lines(parsed, raw, (bad, lines), run.tolerate, run.progress)
        changed = {int(r[BUCKET]): int(r["count"]) for r in counts if not r["bad"] and r[BUCKET] is not None}
        created = [float(r["oldest"]) for r in counts if not r["bad"] and r["oldest"] is not None]
        merge = merge_incremental(run, new_changes(run, parsed), changed, driver_rows=driver_rows)
    except BaseException:
        kept.unpersist()
        raise
    touched = sorted(changed)
    rewritten = {kind: sorted(p.rewrite) for kind, p in merge.plans.items()}
    describe = f"[2/4] merging into {len(touched)} of {layout.buckets} bucket(s): " + "; ".join(
        f"{kind} {len(done)} rewritten, {len(touched) - len(done)} patched"
        for kind, done in rewritten.items()
    )

    def finish(out: str, written: list[str]) -> Outcome:
        changes, deletes, files = merge.outcome(run.tables, out, stored_schema(keys), written)
        return Outcome(changes, lines, bad, files, deletes)

    return RunPlan(
        merge.rows,
        parsed,
        describe,
        finish,
        rewritten=rewritten,
        touched=touched,
        planned=merge.planned(run.tables),
        oldest_change=min(created, default=None),
        cached=[kept, merge.patched],
    )


@dataclass(frozen=True)
class IncrementalMerge:
    """What an incremental run writes (``rows``) and what it learnt on the way (``patched``, kept)."""

    rows: DataFrame
    patched: DataFrame
    plans: dict[str, Plan]  # per table ("items", "tombstones"): which buckets it rewrites, which it patches
    files: list[FileTask]  # the touched buckets' data files, both tables: a row's FILE indexes this
    kinds: list[str]  # per file, the table it belongs to: "items" or "tombstones"
    key_names: tuple[str, ...]  # a rewritten bucket's rows are sorted by these
    driver_rewrite: bool = False  # the rewritten buckets are left to the driver (pipeline/rewrite.py)

    def outcome(
        self, tables: SnapshotTables, out: str, stored: T.StructType, written: list[str]
    ) -> tuple[int, dict[str, dict[int, pa.Table]], list[str]]:
        """New changes merged, the position deletes of the patched buckets (kind → bucket →
        :data:`pipeline.deletes.POSITION_DELETE_ARROW`), and the run's data files (``written``:
        what Spark wrote into ``out``). Two small jobs over the kept patch, and only the deletes come
        to the driver, which writes their files (a patched bucket has fewer than
        ``rewrite_deleted_share`` of its rows deleted). They stay Arrow columns from the JVM to
        the delete files: Python rows cost a third of a second per 10 000 deletes.

        With :attr:`driver_rewrite`, the replaced rows of the rewritten buckets come along too, and
        the driver writes each of those buckets as one file: its kept rows and the run's new rows
        Spark wrote for it, whose file it replaces (:func:`pipeline.rewrite.rewrite_bucket`)."""
        total = reading(lambda: self.patched.agg(F.sum(snapshot.CHANGES)).first())
        deletes: dict[str, dict[int, pa.Table]] = {kind: {} for kind in KINDS}
        replaced: dict[str, dict[int, pa.Table]] = {kind: {} for kind in KINDS}
        parts = ["patch", "rewrite"] if self.driver_rewrite else ["patch"]
        if any(getattr(plan, part) for plan in self.plans.values() for part in parts):
            wanted = in_buckets(self.plans, "patch", self.kinds)
            if self.driver_rewrite:
                wanted = wanted | in_buckets(self.plans, "rewrite", self.kinds)
            gone = patch.deleted_rows(self.patched).filter(wanted)
            found = reading(lambda: to_arrow(gone.select(BUCKET, FILE, POS)))
            places = found.column(FILE).combine_chunks()
            paths = pa.array([task.path for task in self.files], pa.string()).take(places)
            positions = pa.table({"file_path": paths, "pos": found.column(POS).combine_chunks()})
            items = len(self.kinds) - self.kinds.count("tombstones")
            in_items = pc.less(places, items)
            buckets = found.column(BUCKET).combine_chunks()
            for kind, mask in (("items", in_items), ("tombstones", pc.invert(in_items))):
                for bucket in pc.unique(pc.filter(buckets, mask)).to_pylist():
                    chosen = positions.filter(pc.and_(mask, pc.equal(buckets, bucket)))
                    (deletes if bucket in self.plans[kind].patch else replaced)[kind][bucket] = chosen
        if self.driver_rewrite:
            written = self._rewrite(tables, out, stored, replaced, written)
        return int(total[0] or 0) if total is not None else 0, deletes, written

    def _rewrite(
        self,
        tables: SnapshotTables,
        out: str,
        stored: T.StructType,
        replaced: dict[str, dict[int, pa.Table]],
        written: list[str],
    ) -> list[str]:
        """Each rewritten bucket that the table holds, as one file the driver writes into ``out``
        in place of Spark's file of its new rows; the run's data files after that."""
        table = tables.items_table()
        if table is None:
            raise SnapshotStoreError(f"table {tables.items_name} vanished during the run")
        schema = arrow_schema(stored)
        jobs: list[tuple[list[FileTask], pa.Table | None, list[str], str]] = []
        for kind, plan in self.plans.items():
            for bucket in sorted(plan.rewrite):
                tasks = [
                    t for t, k in zip(self.files, self.kinds, strict=True) if k == kind and t.bucket == bucket
                ]
                if not tasks:
                    continue  # a bucket the table does not hold yet: Spark's file of its new rows is all
                folder = as_file_uri(join(out, f"kind={kind}", f"b={bucket}"))
                fresh = [f for f in written if f.startswith(folder + "/")]
                jobs.append((tasks, replaced[kind].get(bucket), fresh, folder))

        def one(job: tuple[list[FileTask], pa.Table | None, list[str], str]) -> str | None:
            tasks, gone, fresh, folder = job
            return rewrite.rewrite_bucket(
                table, tasks, gone, fresh=fresh, schema=schema, folder=folder, keys=self.key_names
            )

        # A few buckets at once: on S3 each file is requests to wait for (the tombstones' buckets,
        # rewritten every run, are many small files).
        with ThreadPoolExecutor(max_workers=rewrite.THREADS) as pool:
            locations = list(pool.map(one, jobs))
        folded = {path for _, _, fresh, _ in jobs for path in fresh}
        for path in sorted(folded):
            table.io.delete(path)
        return [f for f in written if f not in folded] + [loc for loc in locations if loc is not None]

    def planned(self, tables: SnapshotTables) -> dict[str, list[FileTask]]:
        """Per table name, the touched buckets' files as this run planned them (what its commit
        replaces and folds: the tables cannot have moved since, :meth:`SnapshotTables.commit`)."""
        names = {"items": tables.items_name, "tombstones": tables.tombstones_name}
        planned: dict[str, list[FileTask]] = {name: [] for name in names.values()}
        for task, kind in zip(self.files, self.kinds, strict=True):
            planned[names[kind]].append(task)
        return planned


def in_buckets(plans: dict[str, Plan], part: str, kinds: list[str]) -> Column:
    """True for a located row (:data:`FILE`, :data:`BUCKET`) in a bucket its table's plan puts in
    ``part`` ("rewrite" or "patch"). The files are numbered items first, then tombstones."""
    items = kinds.count("items")
    chosen = {kind: sorted(getattr(plan, part)) for kind, plan in plans.items()}
    in_items = (F.col(FILE) < F.lit(items)) & F.col(BUCKET).isin(chosen["items"])
    in_tombstones = (F.col(FILE) >= F.lit(items)) & F.col(BUCKET).isin(chosen["tombstones"])
    return in_items | in_tombstones


def merge_incremental(
    run: RunContext, changes: DataFrame, changed: dict[int, int], *, driver_rows: int = locate.DRIVER_ROWS
) -> IncrementalMerge:
    """The rows an incremental run writes, and what it deletes (the module's docstring says how)."""
    spark, keys, tables = run.spark, run.keys, run.tables
    stored = stored_schema(keys)
    touched = sorted(changed)
    items = tables.tasks(tables.items_name, touched)
    tombstones = tables.tasks(tables.tombstones_name, touched)
    files = [*items, *tombstones]
    kinds = ["items"] * len(items) + ["tombstones"] * len(tombstones)
    plans = {
        kind: plan_buckets(
            bucket_files(tasks),
            changed,
            rewrite_deleted_share=run.rewrite_deleted_share,
            max_files_per_bucket=run.max_files_per_bucket,
            run=(run.state.run if run.state is not None else 0) + 1,
        )
        for kind, tasks in (("items", items), ("tombstones", tombstones))
    }
    columns = [*keys.names, BUCKET, *patch.ORDER_COLUMNS]
    # The driver holds every change's key and reads every touched row: both must be few.
    on_driver = max(sum(task.rows for task in files), sum(changed.values())) <= driver_rows
    if on_driver:
        # Not distinct(): a shuffle and its job cost more than the driver's de-duplication.
        wanted = (
            reading(lambda: to_arrow(changes.select(BUCKET, *keys.names)))
            .group_by([BUCKET, *keys.names])
            .aggregate([])
        )
        schema = arrow_schema(T.StructType([stored[name] for name in columns]))
        found = locate.locate(tables.items_table(), files, wanted, keys.names, schema)
        located = small_frame(spark, {name: found.column(name) for name in found.column_names})
    else:
        only = changes.select(*keys.names).distinct()
        located = read_live(spark, stored, files, columns=columns, locate=True, only=only, keys=keys.names)
    patched = patch.patch(located, changes, keys).persist(StorageLevel.MEMORY_AND_DISK)
    rows = patch.new_rows(patched, keys)
    rewritten = [task for task, kind in zip(files, kinds, strict=True) if task.bucket in plans[kind].rewrite]
    # The kept rows of a rewritten bucket are copied as they are: by the driver when they are few
    # (no job, no shuffle of whole items: pipeline/rewrite.py), else read here and written by Spark.
    driver_rewrite = on_driver and sum(task.rows for task in rewritten) <= min(
        driver_rows, rewrite.DRIVER_REWRITE_ROWS
    )
    if rewritten and not driver_rewrite:
        replaced = patch.deleted_rows(patched).filter(in_buckets(plans, "rewrite", kinds))
        kept = read_live(spark, stored, rewritten, numbering=files, also_deleted=replaced)
        rows = rows.unionByName(kept.withColumn(snapshot.CHANGES, F.lit(0)))
    return IncrementalMerge(
        snapshot.by_bucket(rows, len(touched)),
        patched,
        plans,
        files,
        kinds,
        tuple(keys.names),
        driver_rewrite and bool(rewritten),
    )

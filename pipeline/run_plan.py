"""What a snapshot run's two modes share: the run as it starts (:class:`RunContext`), the frame of
its new changes (:func:`new_changes`), and what each mode hands back (:class:`RunPlan`).

:func:`pipeline.snapshot_run.run_snapshot` lists the change log, asks one mode for a plan
(:mod:`pipeline.full_run` or :mod:`pipeline.incremental_run`), writes the plan's rows, lets the plan
finish on what was written, and commits: the modes differ in what they read and how they merge, not
in how a run is listed, written or committed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline import parse, snapshot
from pipeline.changelog import Selection
from pipeline.log_lines import Progress
from pipeline.ranges import KeyRanges
from pipeline.reading import small_frame
from pipeline.schemas import CREATED, KeySchema
from pipeline.stored import BUCKET, FileTask, stored_schema
from pipeline.table import SnapshotTables, TableState


@dataclass(frozen=True)
class RunContext:
    """A run once it has listed the change log: everything either mode plans from."""

    spark: SparkSession
    keys: KeySchema
    tables: SnapshotTables
    selection: Selection
    state: TableState | None
    marks: dict[str, str]  # the watermarks the run starts from (empty for a full rebuild)
    buckets: int  # the most buckets the tables may have
    tolerate: int
    progress: Progress
    rewrite_deleted_share: float
    max_files_per_bucket: int

    @property
    def start_time(self) -> float | None:
        return None if self.state is None else self.state.start_time


@dataclass(frozen=True)
class Outcome:
    """What a run learnt once its rows were written."""

    new_changes: int
    lines: int
    bad: int
    written: list[str]  # the run's data files, as committed
    deletes: dict[str, dict[int, pa.Table]] = field(default_factory=lambda: {"items": {}, "tombstones": {}})


@dataclass(frozen=True)
class RunPlan:
    """One mode's merge, before anything is written.

    ``rows`` is what Spark writes (:func:`pipeline.snapshot.write_parts`); ``finish`` takes the run's
    folder and the files written there and returns the :class:`Outcome`. ``rewritten`` names, per
    table, the buckets whose old files the commit replaces (None: every bucket); ``touched`` the
    buckets the run changed (None: every bucket); ``planned`` the touched buckets' files as the run
    read them; ``ranges`` the key bounds to record (None: the table's stay as they are);
    ``oldest_change`` the earliest creation time among the new changes, when the mode counted it.
    """

    rows: DataFrame
    parsed: DataFrame | None
    describe: str
    finish: Callable[[str, list[str]], Outcome]
    rewritten: dict[str, list[int]] | None = None
    touched: list[int] | None = None
    planned: dict[str, list[FileTask]] | None = None
    ranges: KeyRanges | None = None
    oldest_change: float | None = None
    cached: list[DataFrame] = field(default_factory=list)

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


def with_bucket(frame: DataFrame, keys: KeySchema, ranges: KeyRanges) -> DataFrame:
    """``frame`` with each row's bucket: its key's range."""
    return frame.withColumn(BUCKET, ranges.column(keys))


def new_changes(run: RunContext, parsed: DataFrame | None) -> DataFrame:
    """The run's usable changes in the stored schema plus :data:`pipeline.snapshot.NEW`: the valid
    lines of ``parsed`` (which carries :data:`BUCKET`) above the watermarks, and (after a bootstrap)
    created at or after its start time, which the bootstrapped state already holds."""
    stored = stored_schema(run.keys)
    if parsed is None:
        changes = run.spark.createDataFrame([], stored)
    else:
        changes = parse.valid_changes(parsed, run.keys, extra=(BUCKET,))
        if run.marks:
            shards = sorted(run.marks)
            previous = small_frame(
                run.spark,
                {
                    "shard_id": pa.array(shards, pa.string()),
                    "sequence_number": pa.array([run.marks[s] for s in shards], pa.string()),
                },
            )
            changes = snapshot.after_watermarks(changes, previous)
        if run.start_time is not None:
            changes = changes.filter(F.col(CREATED).isNull() | (F.col(CREATED) >= F.lit(run.start_time)))
    return changes.select(*stored.fieldNames()).withColumn(snapshot.NEW, F.lit(True))

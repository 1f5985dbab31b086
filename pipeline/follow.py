"""Continuous mode: keep the snapshot within ``pipeline.freshness_seconds`` of the change log.

``consumer pipeline follow --env X`` (and the EMR Serverless job the stacks schedule) runs
incremental snapshot runs back to back in one Spark session: a run starts as soon as the last one
committed if new objects landed meanwhile, else after a short poll (a tenth of the freshness, from
1 to 10 s: listing the change log is cheap). A change is then visible at most one sink batch, one
poll and two runs after DynamoDB made it. Incremental runs in a loop, rather than a Spark
streaming query, because the run already reads only new objects and commits its watermarks with
its data, so each run is short (bench/lake_freshness.py measures them under a steady load).

Exactly once across restarts: the only state is in the tables — each commit moves the watermarks
with the data (:meth:`pipeline.table.SnapshotTables.commit`) — so a process killed anywhere leaves
either the last commit (its run's files are orphans, removed later) or a half commit that the next
run repairs; a restarted ``follow`` lists from the committed watermarks and merges every change
after them once. A run that loses a race (another run or a maintenance pass committed first) wrote
nothing and runs again.

Between runs, every ``pipeline.maintenance_interval_minutes``, a maintenance pass compacts, expires
tombstones and removes orphan files (:mod:`pipeline.maintenance`). After each run the loop reports
its freshness — how old the oldest change it merged was when the commit made it visible, 0 when
nothing was waiting — to a :data:`Report` (a line, and CloudWatch on AWS: :mod:`pipeline.freshness`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from ground.settings import Settings
from pipeline.errors import ConcurrentRunError, HalfCommittedError, PipelineError
from pipeline.log_lines import Progress, quiet
from pipeline.maintenance import MaintenanceResult, Policy, maintain
from pipeline.snapshot_run import SnapshotResult, run_snapshot, snapshot_tables
from pipeline.storage import Store
from pipeline.table import SnapshotTables

Report = Callable[[float], None]  # the freshness after a run, in seconds
Clock = Callable[[], float]


def _no_report(_: float) -> None:
    return None


@dataclass
class FollowResult:
    runs: int = 0  # runs that committed
    changes: int = 0  # new changes they merged
    retried: int = 0  # runs that lost a race or half-committed, run again
    failed: int = 0  # runs that failed otherwise (named on the progress), tried again after a pause
    maintenance: list[MaintenanceResult] = field(default_factory=list)


class IdleQuiet:
    """A run's progress lines, as ``follow`` shows them: a run that found nothing new (its listing
    line and its "up to date" line, exactly two) says nothing, and ``follow`` says once that it is
    waiting; any other run's lines pass, each at most two lines late. So an idle follow does not
    print two lines every poll and bury the runs that did something."""

    HELD = 2

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.held: list[str] = []

    def __call__(self, line: str) -> None:
        self.held.append(line)
        if len(self.held) > self.HELD:
            self.flush()

    def flush(self) -> None:
        for line in self.held:
            self.progress(line)
        self.held = []

    def end_run(self, result: SnapshotResult | None) -> None:
        """After a run: drop an idle run's two lines, pass any other run's."""
        if result is not None and result.up_to_date and len(self.held) <= self.HELD:
            self.held = []
        self.flush()


def poll_seconds(freshness: float) -> float:
    """How long an up-to-date loop waits before listing again: a tenth of the freshness, 1 to 10 s."""
    return max(1.0, min(10.0, freshness / 10))


def follow(
    spark: SparkSession,
    settings: Settings,
    *,
    stop: Callable[[], bool],
    tables: SnapshotTables | None = None,
    store: Store | None = None,
    progress: Progress = quiet,
    report: Report = _no_report,
    clock: Clock = time.time,
    sleep: Callable[[float], None] = time.sleep,
    maintenance: bool = True,
    on_run: Callable[[SnapshotResult], None] | None = None,
) -> FollowResult:
    """Run incremental snapshot runs until ``stop()`` is true (checked between runs); maintain
    between them on the policy's interval. The first run may be a full one (a table never laid
    out), as ``consumer pipeline snapshot`` would make it."""
    config = settings.pipeline
    tables = tables or snapshot_tables(settings)
    policy = Policy.of(config)
    interval = config.maintenance_interval_minutes * 60
    poll = poll_seconds(config.freshness_seconds)
    done = FollowResult()
    last_maintenance = clock()
    lines = IdleQuiet(progress)
    idle = False
    while not stop():
        try:
            result = run_snapshot(spark, settings, store=store, progress=lines, tables=tables)
            lines.end_run(result)
        except (ConcurrentRunError, HalfCommittedError) as exc:
            lines.end_run(None)
            done.retried += 1
            progress(f"[follow] {exc}")
            continue
        except PipelineError as exc:  # e.g. malformed lines beyond the tolerance: a person must act
            lines.end_run(None)
            done.failed += 1
            progress(f"[follow] error: {exc}; trying again in {poll:.0f} s")
            sleep(poll)
            continue
        committed = clock()
        if result.up_to_date and not idle:
            progress(
                f"[follow] up to date ({result.objects_already_merged} object(s) merged): listing the "
                f"change log every {poll:g} s until new objects land"
            )
        idle = result.up_to_date
        if result.up_to_date:
            report(0.0)
        else:
            done.runs += 1
            done.changes += result.new_changes
            oldest = result.oldest_change
            report(max(0.0, committed - oldest) if oldest is not None else 0.0)
        if on_run is not None:
            on_run(result)
        if maintenance and committed - last_maintenance >= interval and not stop():
            try:
                done.maintenance.append(maintain(tables, policy, now=committed, progress=progress))
            except ConcurrentRunError as exc:
                progress(f"[follow] maintenance: {exc}")
            last_maintenance = clock()
        if result.up_to_date:
            sleep(poll)
    return done

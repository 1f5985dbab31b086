"""A full rebuild: every bucket from the whole change log (and a bootstrap's base), in one pass.

The lines are parsed by Spark's JSON reader as the merge reads them (counted by an observation,
not by a job of their own; objects holding bad lines are read again as text to locate them), items
stay in wire form until each key's winner is typed, and the merge is one shuffle by
bucket (:func:`pipeline.snapshot.rebuild`). The key ranges are chosen again from a sample of the
log (:mod:`pipeline.ranges`), unless a bootstrap's base fixed them: its rows keep their buckets.
"""

from __future__ import annotations

from urllib.parse import unquote

from pyspark.sql import Observation
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline import parse, ranges, snapshot
from pipeline.changelog import may_hold_copies
from pipeline.log_lines import read_lines, read_records, report_bad_lines
from pipeline.reading import path_key, read_live
from pipeline.run_plan import Outcome, RunContext, RunPlan, new_changes, with_bucket
from pipeline.storage import spark_uri
from pipeline.stored import stored_schema


def plan(run: RunContext) -> RunPlan:
    """The rebuild's rows; its :class:`Outcome` counts the lines and changes it merged."""
    keys = run.keys
    stored = stored_schema(keys)
    uris = [o.uri for o in run.selection.to_read]
    bootstrapped = run.start_time is not None
    chosen = run.state.ranges if bootstrapped and run.state is not None else None
    if chosen is None:
        chosen = ranges.choose(ranges.sample_keys(uris, keys), run.buckets)
    layout = chosen or ranges.KeyRanges(())
    lines_seen = Observation("lines")
    parsed = None
    if uris:
        # Parsed by the JSON reader (no line numbers: bad lines are located again, below), items in
        # wire form: only each key's winner is typed, after the merge. The lines are counted as
        # they leave the parse, before the bucket is added: an observation ends a stage's generated
        # code, so the parse and the bucket get a method each, both under the size above which the
        # JVM leaves a method interpreted (tests/pipeline/test_generated_code.py).
        observed = parse.parse_records(read_records(run.spark, uris), keys, typed=False).observe(
            lines_seen,
            F.count(F.lit(1)).alias("lines"),
            F.count_if(F.col("_problem").isNotNull()).alias("bad"),
            F.collect_set(F.when(F.col("_problem").isNotNull(), F.col("file"))).alias("bad_files"),
        )
        parsed = with_bucket(observed, keys, layout)
    changes = new_changes(run, parsed)
    base = None
    if bootstrapped:  # its rows take this run's buckets (the same, unless an older base had none)
        base = with_bucket(read_live(run.spark, stored, run.tables.tasks(run.tables.base_name)), keys, layout)
    # A window merges, and rows are counted as changes, when no change can be in two objects (the
    # listing says so: pipeline/changelog.py); else an aggregation counts them per key.
    counted = Observation("snapshot")
    rows = snapshot.rebuild(
        changes,
        keys,
        base,
        buckets=layout.buckets,
        copies=may_hold_copies(run.selection.to_read),
        counted=counted,
    )

    def finish(out: str, written: list[str]) -> Outcome:
        lines = bad = 0
        if parsed is not None:
            seen = lines_seen.get
            lines, bad = int(seen["lines"]), int(seen["bad"])
            if bad:  # rare: the objects holding bad lines, read again as text, say where they are
                named = {path_key(unquote(name)) for name in seen["bad_files"]}
                holding = [u for u in uris if path_key(spark_uri(u)) in named] or uris
                raw = read_lines(run.spark, holding)
                again = parse.parse_lines(raw, keys, typed=False)
                report_bad_lines(again, raw, (bad, lines), run.tolerate, run.progress)
        return Outcome(int(counted.get["changes"]), lines, bad, written)

    return RunPlan(rows, parsed, "[2/4] merging into every bucket", finish, ranges=chosen)

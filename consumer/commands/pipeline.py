"""``consumer pipeline snapshot|stats|verify``: the Spark jobs over the change log, in local mode.

The same jobs run on a cluster with ``spark-submit pipeline/jobs.py <job> --env X``; this command
only starts one quiet local session (``pipeline.spark_master``) and prints a line per stage. Spark's
warnings and log4j banners are hidden (errors are not); ``-v`` shows them.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from consumer.cli import CommandError
from consumer.commands import add_env_arguments, settings_from

JOBS = {
    "snapshot": "change log -> current state of the table as Parquet (incremental, atomic pointer)",
    "stats": "changes per minute by event type, end-to-end lag percentiles, items per shard (+ PNG)",
    "verify": "compare the snapshot with a scan of the live table; exit 1 on any difference",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pipeline", help="Spark jobs over the change log: snapshot, stats, verify (local mode)"
    )
    jobs = parser.add_subparsers(dest="job", metavar="JOB", required=True)
    for name, description in JOBS.items():
        job = jobs.add_parser(name, help=description, description=description)
        add_env_arguments(job)
        job.add_argument(
            "--tolerate-bad-lines",
            type=int,
            default=None,
            help="malformed change-log lines allowed (default: pipeline.tolerate_bad_lines)",
        )
        job.add_argument(
            "-v", "--verbose", action="store_true", help="show Spark's own warnings and log4j banners"
        )
        if name == "snapshot":
            job.add_argument("--full", action="store_true", help="rebuild from the whole change log")
        job.set_defaults(handler=_run, full=False)


def _run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    # Imported here: PySpark is heavy and only this command needs it.
    jobs: Any = importlib.import_module("pipeline.jobs")
    errors: Any = importlib.import_module("pipeline.errors")
    try:
        code: int = jobs.execute(args, settings, settings.pipeline.spark_master)
    except errors.PipelineError as exc:
        raise CommandError(str(exc)) from exc
    return code

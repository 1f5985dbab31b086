"""Entry points of the pipeline's jobs.

Runs locally through ``consumer pipeline snapshot|bootstrap|stats|verify|follow|maintain --env X``
and on a cluster through ``spark-submit pipeline/jobs.py <job> --env X`` (or ``python -m
pipeline.jobs``); both parse the same arguments here and call the jobs: :func:`run_snapshot`
(:mod:`pipeline.snapshot_run`), :func:`run_bootstrap` (:mod:`pipeline.bootstrap_run`),
:func:`run_stats` and :func:`run_verify` (:mod:`pipeline.reports`), :func:`pipeline.follow.follow`
and :func:`pipeline.maintenance.maintain`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession

from ground.settings import Settings
from pipeline.bootstrap_run import run_bootstrap
from pipeline.errors import PipelineError
from pipeline.follow import follow
from pipeline.freshness import CloudWatchFreshness
from pipeline.maintenance import Policy, maintain
from pipeline.reports import run_stats, run_verify
from pipeline.snapshot_run import run_snapshot, snapshot_tables

JOBS = ("snapshot", "bootstrap", "stats", "verify", "follow", "maintain")


def dynamodb_client(settings: Settings) -> Any:
    """The table's client, through the same endpoint settings the workers use."""
    import boto3

    return boto3.client("dynamodb", region_name=settings.region, endpoint_url=settings.endpoint_url)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="pipeline.jobs", description="Spark jobs over the change log (spark-submit-ready)."
    )
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("--env", default="local", help="environment: config/<env>.yaml (default: local)")
    parser.add_argument("--config-dir", default=None, help="configuration directory (default: ./config)")
    parser.add_argument("--master", default=None, help="Spark master (default: the submitter's)")
    parser.add_argument("--full", action="store_true", help="snapshot: rebuild from the whole change log")
    parser.add_argument("--verify", action="store_true", help="snapshot: then verify, in the same session")
    parser.add_argument(
        "--tolerate-bad-lines", type=int, default=None, help="override pipeline.tolerate_bad_lines"
    )
    add_bootstrap_arguments(parser)
    add_follow_arguments(parser)
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show Spark's own warnings and log4j banners"
    )
    return parser


def add_bootstrap_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--export",
        default=None,
        metavar="URI",
        help="bootstrap: a DynamoDB export's folder (DYNAMODB_JSON; default: a parallel scan)",
    )
    parser.add_argument(
        "--segments", type=int, default=4, help="bootstrap without --export: parallel scan segments (4)"
    )


def add_follow_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="follow: stop after this many minutes (default: until SIGTERM or Ctrl-C)",
    )
    parser.add_argument(
        "--no-maintenance", action="store_true", help="follow: no maintenance passes between runs"
    )
    parser.add_argument(
        "--publish-metrics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="follow: send LakeFreshnessSeconds to CloudWatch (default: with pipeline.emr_serverless)",
    )


def execute(args: argparse.Namespace, settings: Settings, master: str | None) -> int:
    """Run one job in a fresh session; the exit code is non-zero when verify finds a difference."""
    if args.job == "maintain":  # PyIceberg and PyArrow only: no Spark session to start
        maintain(snapshot_tables(settings), Policy.of(settings.pipeline), progress=_say)  # says its line
        return 0
    spark = build_session_for(master, verbose=bool(getattr(args, "verbose", False)))
    try:
        return _execute(spark, args, settings)
    finally:
        spark.stop()


def build_session_for(master: str | None, *, verbose: bool = False) -> SparkSession:
    from pipeline.session import build_session

    return build_session(master, verbose=verbose)


def _say(line: str) -> None:
    print(line, flush=True)


def _follow(spark: SparkSession, args: argparse.Namespace, settings: Settings) -> int:
    """``follow`` until SIGTERM / SIGINT (the run in progress finishes and commits first) or
    ``--minutes``; each run's freshness is printed, and sent to CloudWatch on AWS."""
    minutes = getattr(args, "minutes", None)
    deadline = None if minutes is None else time.monotonic() + float(minutes) * 60
    # The handler only notes the signal: Python runs it on the main thread, which may be inside its
    # own write to stdout at that moment, and a print from the handler would then raise ("reentrant
    # call") instead of stopping. The loop says so when it next asks whether to stop.
    signalled: list[int] = []
    said = False

    def stop_on_signal(signum: int, _: object) -> None:
        signalled.append(signum)

    def stop() -> bool:
        nonlocal said
        if signalled and not said:
            _say(f"[follow] {signal.Signals(signalled[0]).name}: stopping after the run in progress")
            said = True
        return bool(signalled) or (deadline is not None and time.monotonic() >= deadline)

    previous = {sig: signal.signal(sig, stop_on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    publish = getattr(args, "publish_metrics", None)
    cloudwatch = (
        CloudWatchFreshness(settings, progress=_say)
        if (settings.pipeline.emr_serverless if publish is None else publish)
        else None
    )

    def report(seconds: float) -> None:
        if seconds > 0:
            _say(f"[follow] freshness {seconds:.1f} s")
        if cloudwatch is not None:
            cloudwatch(seconds)

    try:
        done = follow(
            spark,
            settings,
            stop=stop,
            progress=_say,
            report=report,
            maintenance=not getattr(args, "no_maintenance", False),
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _say(
        f"[follow] stopped: {done.runs} run(s) committed {done.changes} change(s); {done.retried} run "
        f"again after a race, {done.failed} failed; {len(done.maintenance)} maintenance pass(es)"
    )
    return 0


def _execute(spark: SparkSession, args: argparse.Namespace, settings: Settings) -> int:
    say = _say
    if args.job == "follow":
        return _follow(spark, args, settings)
    if args.job == "snapshot":
        run_snapshot(
            spark, settings, full=args.full, tolerate_bad_lines=args.tolerate_bad_lines, progress=say
        )
        return _verify(spark, settings) if getattr(args, "verify", False) else 0
    if args.job == "bootstrap":
        run_bootstrap(
            spark,
            settings,
            export_uri=getattr(args, "export", None),
            segments=int(getattr(args, "segments", 4)),
            progress=say,
        )
        return 0
    if args.job == "stats":
        result = run_stats(spark, settings, tolerate_bad_lines=args.tolerate_bad_lines, progress=say)
        figures = ", ".join(f"{k} {v:.3f}" for k, v in result.lag.items() if v is not None)
        spread = f"{result.minutes} minute(s) on {result.shards} shard(s)"
        say(f"{result.changes} changes over {spread}; lag {figures}")
        return 0
    return _verify(spark, settings)


def _verify(spark: SparkSession, settings: Settings) -> int:
    """``verify``, alone or after ``snapshot --verify``: 1 when the snapshot and a scan differ."""
    verdict = run_verify(spark, settings, dynamodb_client(settings), progress=_say)
    for status, keys in verdict.examples.items():
        _say(f"{status}: " + ", ".join(keys))
    _say("verify: OK" if verdict.differences == 0 else f"verify: {verdict.differences} difference(s)")
    return 0 if verdict.differences == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    from ground.settings import ConfigError, load_settings

    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args.env, args.config_dir)
        return execute(args, settings, args.master)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"configuration error: {problem}", file=sys.stderr)
        return 2
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""``consumer pipeline snapshot|bootstrap|stats|verify|follow|maintain``: the Spark jobs over the
change log, in a local Spark session; ``consumer pipeline submit JOB``: the same job on EMR Serverless.

The same jobs run on a cluster with ``spark-submit pipeline/jobs.py <job> --env X``; the local
commands only start one quiet local session (``pipeline.spark_master``) and print a line per stage.
Spark's warnings and log4j banners are hidden (errors are not); ``-v`` shows them.

``submit`` builds the archives (:mod:`tools.emr.package`), uploads the new ones under
content-hashed keys and starts the run (:mod:`tools.emr.aws`); ``--dry-run`` stops before any AWS
call and prints the uploads and the StartJobRun request instead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import consumer
from ground.settings import Settings, config_dir
from tools.commands import (
    CommandError,
    ExitCode,
    add_command,
    add_env_arguments,
    require_local_endpoint_up,
    settings_from,
)
from tools.emr import aws, fetch, package, request

DEFAULT_BUILD_DIR = Path("var/emr-build")
# The architecture infra gives the application (infra.pipeline_resources.EMR_ARCHITECTURE); a real
# submit reads it from the application itself.
EMR_ARCHITECTURE = "X86_64"

JOBS = {
    "snapshot": "change log -> the table's current state as an Iceberg table (incremental, by key bucket)",
    "bootstrap": "first snapshot from a DynamoDB export (--export URI) or a parallel scan, then the log",
    "stats": "changes per minute by event type, end-to-end lag percentiles, items per shard (+ PNG)",
    "verify": "compare the snapshot with a scan of the live table; exit 1 on any difference",
    "follow": "keep the snapshot within pipeline.freshness_seconds of the change log: runs in a loop, "
    "maintenance between them, until SIGTERM / Ctrl-C (or --minutes)",
    "maintain": "one maintenance pass: compact patched buckets, expire old tombstones, remove orphan files",
}


def register(subparsers: Any) -> None:
    listed = ", ".join(JOBS)
    parser = add_command(
        subparsers,
        "pipeline",
        f"Spark jobs over the change log: {listed}; submit runs one on EMR Serverless",
        f"The Spark jobs over the change log the workers land: {listed}. Each runs here in a local "
        "Spark session (pipeline.spark_master) with one line per stage; `submit JOB` runs the same "
        "job on the environment's EMR Serverless application.",
    )
    jobs = parser.add_subparsers(dest="job", metavar="JOB", required=True)
    for name, description in JOBS.items():
        job = add_command(
            jobs, name, description, f"{description[0].upper()}{description[1:]}, in a local Spark session."
        )
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
            job.add_argument(
                "--verify",
                action="store_true",
                help="then run verify in the same Spark session (one start-up instead of two; exit 1 "
                "on any difference)",
            )
        if name == "bootstrap":
            _bootstrap_arguments(job)
        if name == "follow":
            _follow_arguments(job)
        job.set_defaults(handler=_run, full=False, verify=False)
    _register_submit(jobs)


def _bootstrap_arguments(parser: Any) -> None:
    parser.add_argument(
        "--export",
        default=None,
        metavar="URI",
        help="a DynamoDB export's folder (…/AWSDynamoDB/<export id>, DYNAMODB_JSON); default: a parallel scan",
    )
    parser.add_argument(
        "--segments", type=int, default=4, help="without --export: parallel scan segments (default 4)"
    )


def _follow_arguments(parser: Any) -> None:
    parser.add_argument(
        "--minutes", type=float, default=None, help="stop after this many minutes (default: until SIGTERM)"
    )
    parser.add_argument("--no-maintenance", action="store_true", help="no maintenance passes between runs")
    parser.add_argument(
        "--publish-metrics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send LakeFreshnessSeconds to CloudWatch (default: with pipeline.emr_serverless)",
    )


def _register_submit(jobs: Any) -> None:
    description = (
        "Run JOB on the environment's EMR Serverless application: build the code, configuration and "
        "Python environment archives, upload those not in S3 yet, start the job run, print its id."
    )
    submit = add_command(jobs, "submit", "run one of the jobs above on EMR Serverless", description)
    submit.add_argument("job", metavar="JOB", choices=list(JOBS), help=", ".join(JOBS))
    add_env_arguments(submit)
    submit.add_argument("--dry-run", action="store_true", help="build, then print the uploads and request")
    submit.add_argument(
        "--release",
        action="store_true",
        help="follow: upload the archives as the release the stacks' scheduled follow jobs run "
        f"(<work prefix>/{request.RELEASE_FOLDER}/), start nothing",
    )
    submit.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="follow: stop after this many minutes (default: until cancelled)",
    )
    submit.add_argument("--application-id", help="the application (default: the fleet stack's output)")
    submit.add_argument("--job-role-arn", help="the job role (default: the fleet stack's output)")
    submit.add_argument(
        "--python-dist",
        help="python-build-standalone install_only archive, path or URL (default: CPython "
        f"{fetch.STANDALONE_PYTHON} for the application's architecture)",
    )
    submit.add_argument(
        "--wheels",
        type=Path,
        help="directory of the job's wheels (default: pip download for the application)",
    )
    submit.add_argument(
        "--build-dir",
        type=Path,
        default=DEFAULT_BUILD_DIR,
        help=f"archives and downloads ({DEFAULT_BUILD_DIR})",
    )
    submit.add_argument("--full", action="store_true", help="snapshot: rebuild from the whole change log")
    submit.add_argument(
        "--tolerate-bad-lines", type=int, default=None, help="override pipeline.tolerate_bad_lines"
    )
    _bootstrap_arguments(submit)
    submit.set_defaults(handler=_submit)


def _run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    # Imported here: PySpark is heavy and only this command needs it.
    from pipeline.bootstrap import ExportTooOldError
    from pipeline.errors import PipelineError
    from pipeline.jobs import execute

    if args.job == "verify" or args.verify or (args.job == "bootstrap" and args.export is None):
        require_local_endpoint_up(settings)  # they scan the table
    try:
        if args.job == "bootstrap" and args.export is not None:
            check_local_export(args.export)
        code: int = execute(args, settings, settings.pipeline.spark_master)
    except ExportTooOldError as exc:
        raise CommandError(str(exc), ExitCode.USAGE) from None
    except PipelineError as exc:
        raise CommandError(str(exc)) from exc
    return code


def check_local_export(export_uri: str) -> None:
    """An export on this machine is checked before Spark starts (seconds, not a session's start-up);
    one on S3 is checked by the job itself, with the same rule."""
    import time

    from pipeline import bootstrap
    from pipeline.storage import LocalStore, is_local

    if is_local(export_uri):
        manifest = bootstrap.read_export_manifest(LocalStore(), export_uri)
        bootstrap.check_export_age(manifest, export_uri, now=time.time())


def _source_root() -> Path:
    """The directory holding the ``consumer`` and ``pipeline`` packages being run."""
    return Path(consumer.__file__).resolve().parents[1]


def _wheels(args: argparse.Namespace, architecture: str) -> list[Path]:
    if args.wheels is not None:
        found = sorted(Path(args.wheels).glob("*.whl"))
        if not found:
            raise CommandError(f"--wheels {args.wheels}: no .whl files there")
        return found
    constraints = _source_root() / "requirements.txt"
    pins = constraints.read_bytes() if constraints.is_file() else b""
    # One directory per set of pins, so a changed pin never leaves an old wheel beside the new one.
    tag = hashlib.sha256(pins + architecture.encode() + fetch.PYTHON_VERSION.encode()).hexdigest()[:12]
    print(f"downloading wheels for {architecture} Python {fetch.PYTHON_VERSION} (cached) ...", flush=True)
    return fetch.download_wheels(args.build_dir / f"wheels-{architecture}-{tag}", architecture, constraints)


def build_artifacts(
    args: argparse.Namespace, settings: Settings, architecture: str
) -> dict[str, package.Artifact]:
    """The four files a run needs, built under ``--build-dir/<env>``."""
    out = Path(args.build_dir) / settings.env
    out.mkdir(parents=True, exist_ok=True)
    source = args.python_dist or fetch.interpreter_url(architecture)
    interpreter = fetch.download_interpreter(source, Path(args.build_dir))
    return {
        "entry_point": package.build_entry_point(out / "entry.py"),
        "code": package.build_code_zip(_source_root(), out / "code.zip"),
        "config": package.build_config_zip(config_dir(args.config_dir), settings.env, out / "config.zip"),
        "environment": package.build_environment(
            interpreter, _wheels(args, architecture), out / "environment.tar.gz"
        ),
    }


def _release(
    args: argparse.Namespace, settings: Settings, artifacts: dict[str, package.Artifact], work: str
) -> int:
    """Upload the archives to the release keys (the entry point last: a job the schedule starts
    meanwhile finds the previous release's entry point, which still runs)."""
    if args.job != "follow":
        raise CommandError("--release publishes what the scheduled follow jobs run: submit follow --release")
    released = request.release_uploaded(work)
    targets = {name: getattr(released, name) for name in ("environment", "config", "code", "entry_point")}
    if args.dry_run:
        for name, uri in targets.items():
            print(f"would upload {artifacts[name].path} to {uri}")
        return 0
    s3 = aws.client(settings, "s3")
    aws.check_bucket(s3, aws.split_s3(work)[0])
    for name, uri in targets.items():
        aws.upload(s3, artifacts[name], uri)
        print(f"released: {uri}")
    print(
        f"the stack's schedule starts follow from this release every {request.FOLLOW_SCHEDULE_MINUTES} minutes"
    )
    return 0


def _submit(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    config = f"config/{settings.env}.yaml"
    if not settings.pipeline.emr_serverless:
        raise CommandError(
            f"pipeline.emr_serverless is false for env {settings.env}: set it in {config} and deploy, "
            f"or run the job locally (consumer pipeline {args.job} --env {settings.env})"
        )
    work = settings.pipeline.emr_work_location
    if work is None:  # the settings refuse this already; kept for a clear message if they change
        raise CommandError(f"pipeline.emr_work_uri: set an s3:// location in {config}")
    try:
        if args.dry_run:
            target = aws.Target(
                application_id=args.application_id or f"<EmrApplicationId of {request.stack_name(settings)}>",
                job_role_arn=args.job_role_arn or f"<EmrJobRoleArn of {request.stack_name(settings)}>",
                architecture=EMR_ARCHITECTURE,
                release_label="",
            )
        else:
            target = aws.find_target(
                settings,
                aws.client(settings, "emr-serverless"),
                aws.client(settings, "cloudformation"),
                application_id=args.application_id,
                job_role_arn=args.job_role_arn,
            )
        artifacts = build_artifacts(args, settings, target.architecture)
        uris = {name: f"{work}/artifacts/{a.key('')}" for name, a in artifacts.items()}
        log_uri = f"{work}/logs/"
        run_request = request.start_job_run_request(
            settings,
            args.job,
            application_id=target.application_id,
            job_role_arn=target.job_role_arn,
            uploaded=request.Uploaded(**uris),
            log_uri=log_uri,
            arguments=request.job_arguments(
                args.job,
                settings.env,
                full=args.full,
                tolerate_bad_lines=args.tolerate_bad_lines,
                export=args.export,
                segments=args.segments if args.job == "bootstrap" and args.export is None else None,
                minutes=args.minutes,
            ),
            client_token=str(uuid.uuid4()),
        )
        if args.release:
            return _release(args, settings, artifacts, work)
        if args.dry_run:
            for name, artifact in artifacts.items():
                size = artifact.path.stat().st_size
                print(f"would upload {artifact.path} ({size} bytes) to {uris[name]} (unless it exists)")
            print("would call emr-serverless StartJobRun with:")
            print(json.dumps(run_request, indent=2))
            return 0
        s3 = aws.client(settings, "s3")
        aws.check_bucket(s3, aws.split_s3(work)[0])
        for name, artifact in artifacts.items():
            done = aws.upload_if_missing(s3, artifact, uris[name])
            print(f"{'uploaded' if done else 'already there'}: {uris[name]}")
        run_id = aws.start_job_run(aws.client(settings, "emr-serverless"), run_request)
    except (aws.SubmitError, package.PackageError) as exc:
        raise CommandError(str(exc)) from exc
    release = target.release_label or "EMR Serverless"
    print(f"started {args.job} on {target.application_id} ({release}): job run {run_id}")
    print("follow it with:")
    for line in request.follow_commands(settings, target.application_id, run_id, log_uri):
        print(f"  {line}")
    return 0

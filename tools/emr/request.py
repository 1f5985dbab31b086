"""Names and the StartJobRun request of a pipeline job on EMR Serverless (pure: data in, data out).

The Spark properties follow the EMR Serverless user guide ("Using Python libraries with EMR
Serverless", "Using different Python versions"): ``spark.archives`` unpacks each archive in the
driver's and executors' working directory under the name after ``#``; the driver's environment is
set with ``spark.emr-serverless.driverEnv.*`` and the executors' with ``spark.executorEnv.*``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ground.settings import Settings
from tools.emr.package import ENVIRONMENT_PYTHON

JOBS = ("snapshot", "bootstrap", "stats", "verify", "follow", "maintain")
CONFIG_DIR_ON_EMR = "./config"
# The stacks keep ``follow`` running as a job an hour long, started every hour by a schedule; each
# runs two minutes more so that the next one is up before it stops (EMR Serverless takes a minute
# or two to start a job). Two ``follow`` runs at once are safe: a run that loses the commit race
# runs again (pipeline/follow.py).
FOLLOW_SCHEDULE_MINUTES = 60
FOLLOW_OVERLAP_MINUTES = 2
FOLLOW_TIMEOUT_MINUTES = FOLLOW_SCHEDULE_MINUTES + 15
RELEASE_FOLDER = "release"  # where ``submit --release`` puts the archives the schedule's jobs use


def stack_name(settings: Settings) -> str:
    """The fleet stack's name (infra.stack.stack_name; a test keeps the two equal)."""
    return f"{settings.application_name}-{settings.env}"


def application_name(settings: Settings) -> str:
    """The EMR Serverless application's name, given by the CDK stack."""
    return f"{settings.application_name}-{settings.env}-pipeline"


@dataclass(frozen=True)
class Uploaded:
    """Where each archive is (or will be) in S3: ``s3://bucket/key`` URIs."""

    entry_point: str
    code: str
    config: str
    environment: str


def job_arguments(
    job: str,
    env: str,
    *,
    full: bool = False,
    tolerate_bad_lines: int | None = None,
    export: str | None = None,
    segments: int | None = None,
    minutes: float | None = None,
) -> list[str]:
    """``pipeline.jobs``'s command line on EMR (its configuration comes from ``#config``)."""
    if job not in JOBS:
        raise ValueError(f"job {job!r}: expected one of {', '.join(JOBS)}")
    arguments = [job, "--env", env, "--config-dir", CONFIG_DIR_ON_EMR]
    if full:
        arguments.append("--full")
    if tolerate_bad_lines is not None:
        arguments += ["--tolerate-bad-lines", str(tolerate_bad_lines)]
    if job == "bootstrap" and export is not None:
        arguments += ["--export", export]
    if job == "bootstrap" and segments is not None:
        arguments += ["--segments", str(segments)]
    if job == "follow" and minutes is not None:
        arguments += ["--minutes", f"{minutes:g}"]
    return arguments


def release_uploaded(work: str) -> Uploaded:
    """The fixed keys ``submit --release`` writes and the scheduled ``follow`` jobs read."""
    root = f"{work.rstrip('/')}/{RELEASE_FOLDER}"
    return Uploaded(
        entry_point=f"{root}/entry.py",
        code=f"{root}/code.zip",
        config=f"{root}/config.zip",
        environment=f"{root}/environment.tar.gz",
    )


def spark_properties(uploaded: Uploaded) -> dict[str, str]:
    """The interpreter of the environment archive for the driver and the executors."""
    return {
        "spark.archives": f"{uploaded.environment}#environment,{uploaded.config}#config",
        "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON": ENVIRONMENT_PYTHON,
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON,
        "spark.executorEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON,
    }


def spark_submit_parameters(uploaded: Uploaded, extra: Mapping[str, str] | None = None) -> str:
    """``--py-files`` (the code) and one ``--conf`` per property, separated by spaces.

    Unquoted, as in AWS's examples (how EMR Serverless splits quotes is not documented), so a value
    holding a space is refused here rather than split there.
    """
    properties = {**spark_properties(uploaded), **(extra or {})}
    parts = ["--py-files", uploaded.code]
    for key, value in properties.items():
        parts += ["--conf", f"{key}={value}"]
    spaced = [part for part in parts if not part or any(c.isspace() for c in part)]
    if spaced:
        raise ValueError(f"spark-submit parameters cannot hold spaces: {spaced}")
    return " ".join(parts)


def start_job_run_request(
    settings: Settings,
    job: str,
    *,
    application_id: str,
    job_role_arn: str,
    uploaded: Uploaded,
    log_uri: str,
    arguments: Sequence[str],
    client_token: str,
    timeout_minutes: int | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``emr-serverless start_job_run`` for one run of ``job``."""
    request: dict[str, Any] = {
        "applicationId": application_id,
        "executionRoleArn": job_role_arn,
        "clientToken": client_token,
        "name": f"{application_name(settings)}-{job}",
        "jobDriver": {
            "sparkSubmit": {
                "entryPoint": uploaded.entry_point,
                "entryPointArguments": list(arguments),
                "sparkSubmitParameters": spark_submit_parameters(uploaded),
            }
        },
        "configurationOverrides": {
            "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": log_uri}}
        },
        "tags": {"application": settings.application_name, "environment": settings.env, "job": job},
    }
    if timeout_minutes is not None:
        request["executionTimeoutMinutes"] = timeout_minutes
    return request


def scheduled_follow_request(
    settings: Settings, *, application_id: str, job_role_arn: str, work: str
) -> dict[str, Any]:
    """The StartJobRun request the stacks' schedule sends every :data:`FOLLOW_SCHEDULE_MINUTES`:
    ``follow`` for that long and :data:`FOLLOW_OVERLAP_MINUTES` more, from the released archives;
    the schedule's execution id is the client token (``<aws.scheduler.execution-id>``, which
    EventBridge Scheduler fills in), so a retried delivery starts no second job."""
    return start_job_run_request(
        settings,
        "follow",
        application_id=application_id,
        job_role_arn=job_role_arn,
        uploaded=release_uploaded(work),
        log_uri=f"{work.rstrip('/')}/logs/",
        arguments=job_arguments(
            "follow", settings.env, minutes=FOLLOW_SCHEDULE_MINUTES + FOLLOW_OVERLAP_MINUTES
        ),
        client_token="<aws.scheduler.execution-id>",
        timeout_minutes=FOLLOW_TIMEOUT_MINUTES,
    )


def follow_commands(settings: Settings, application_id: str, job_run_id: str, log_uri: str) -> list[str]:
    """How to follow a run once it started (printed by submit)."""
    ids = f"--application-id {application_id} --job-run-id {job_run_id} --region {settings.region}"
    return [
        f"aws emr-serverless get-job-run {ids} --query jobRun.state",
        f"aws emr-serverless get-dashboard-for-job-run {ids}",
        f"aws s3 cp {log_uri}applications/{application_id}/jobs/{job_run_id}/SPARK_DRIVER/stdout.gz - | gunzip",
    ]

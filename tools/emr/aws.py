"""Every AWS call of ``consumer pipeline submit``: find the application and the job role, upload the
archives that are not there yet, start the run.

Clients are built like the workers' (``region``, ``endpoint_url``); with no ``endpoint_url`` botocore
also honours ``AWS_ENDPOINT_URL``, which is how the tests point it at moto. Each failure a user can
fix becomes a :class:`SubmitError` naming the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ground.settings import Settings
from tools.emr.package import Artifact
from tools.emr.request import application_name, stack_name

# States in which an application accepts StartJobRun (a stopped one with auto-start starts itself).
STARTABLE = ("CREATED", "STARTING", "STARTED", "STOPPING", "STOPPED")


class SubmitError(Exception):
    """Something on the AWS side is missing or refused; the message says what to do."""


@dataclass(frozen=True)
class Target:
    """The application a job runs on and the role it runs as."""

    application_id: str
    job_role_arn: str
    architecture: str
    release_label: str


def client(settings: Settings, service: str) -> Any:
    from consumer.api.aws import client_for

    return client_for(settings, service)


def _code(exc: Exception) -> str:
    response: dict[str, Any] = getattr(exc, "response", {}) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _explain(exc: Exception, doing: str) -> SubmitError:
    from botocore.exceptions import NoCredentialsError, NoRegionError

    if isinstance(exc, NoCredentialsError | NoRegionError):
        return SubmitError(f"{doing}: {exc} (configure AWS credentials for the account of this environment)")
    return SubmitError(f"{doing}: {exc}")


def stack_outputs(cloudformation: Any, name: str) -> dict[str, str]:
    """The outputs of stack ``name``, or nothing when it does not exist."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except ClientError as exc:
        if _code(exc) == "ValidationError":  # "Stack with id ... does not exist"
            return {}
        raise _explain(exc, f"cannot read stack {name}") from exc
    except BotoCoreError as exc:
        raise _explain(exc, f"cannot read stack {name}") from exc
    return {o["OutputKey"]: o["OutputValue"] for stack in stacks for o in stack.get("Outputs", [])}


def _application_by_name(emr: Any, name: str) -> str | None:
    found = [
        app["id"]
        for page in emr.get_paginator("list_applications").paginate()
        for app in page.get("applications", [])
        if app.get("name") == name and app.get("state") != "TERMINATED"
    ]
    if len(found) > 1:
        raise SubmitError(f"{len(found)} EMR Serverless applications are named {name}: pass --application-id")
    return found[0] if found else None


def find_target(
    settings: Settings,
    emr: Any,
    cloudformation: Any,
    *,
    application_id: str | None = None,
    job_role_arn: str | None = None,
) -> Target:
    """The application and role: given, else the fleet stack's outputs (``EmrApplicationId``,
    ``EmrJobRoleArn``), else (the application only) by its conventional name."""
    from botocore.exceptions import BotoCoreError, ClientError

    stack = stack_name(settings)
    name = application_name(settings)
    deploy = f"deploy the stacks with pipeline.emr_serverless: true (cdk deploy {stack})"
    try:
        outputs = stack_outputs(cloudformation, stack) if not (application_id and job_role_arn) else {}
        application_id = application_id or outputs.get("EmrApplicationId") or _application_by_name(emr, name)
        if not application_id:
            raise SubmitError(
                f"no EMR Serverless application {name} in {settings.region}: {deploy}, "
                "or pass --application-id"
            )
        try:
            application = emr.get_application(applicationId=application_id)["application"]
        except ClientError as exc:
            if _code(exc) in ("ResourceNotFoundException", "ValidationException"):
                raise SubmitError(
                    f"EMR Serverless application {application_id} not found in {settings.region}: {deploy}, "
                    "or pass the right --application-id"
                ) from exc
            raise
    except (ClientError, BotoCoreError) as exc:
        raise _explain(exc, "cannot find the EMR Serverless application") from exc
    state = str(application.get("state", ""))
    if state not in STARTABLE:
        raise SubmitError(f"EMR Serverless application {application_id} is {state}: it cannot run jobs")
    role = job_role_arn or outputs.get("EmrJobRoleArn")
    if not role:
        raise SubmitError(
            f"no job role: stack {stack} has no EmrJobRoleArn output; {deploy}, or pass --job-role-arn"
        )
    return Target(
        application_id=application_id,
        job_role_arn=role,
        architecture=str(application.get("architecture") or "X86_64"),
        release_label=str(application.get("releaseLabel", "")),
    )


def split_s3(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    return parts.netloc, parts.path.lstrip("/")


def check_bucket(s3: Any, bucket: str) -> None:
    """Refuse early, before a long build's upload, when the bucket is not there."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as exc:
        if _code(exc) in ("404", "NoSuchBucket", "NotFound"):
            raise SubmitError(
                f"bucket {bucket} does not exist: deploy the data stack (it creates the change-log "
                "bucket), or point pipeline.emr_work_uri at a bucket that exists"
            ) from exc
        raise _explain(exc, f"cannot use bucket {bucket}") from exc
    except BotoCoreError as exc:
        raise _explain(exc, f"cannot use bucket {bucket}") from exc


def upload_if_missing(s3: Any, artifact: Artifact, uri: str) -> bool:
    """Upload unless the object exists (its key is its content hash); True when uploaded."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = split_s3(uri)
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return False
    except ClientError as exc:
        if _code(exc) not in ("404", "NoSuchKey", "NotFound"):
            raise _explain(exc, f"cannot check {uri}") from exc
    try:
        s3.upload_file(str(artifact.path), bucket, key)
    except (ClientError, BotoCoreError) as exc:
        raise _explain(exc, f"cannot upload {artifact.path} to {uri}") from exc
    return True


def upload(s3: Any, artifact: Artifact, uri: str) -> None:
    """Upload, replacing what is there (the release's fixed keys)."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = split_s3(uri)
    try:
        s3.upload_file(str(artifact.path), bucket, key)
    except (ClientError, BotoCoreError) as exc:
        raise _explain(exc, f"cannot upload {artifact.path} to {uri}") from exc


def start_job_run(emr: Any, request: dict[str, Any]) -> str:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return str(emr.start_job_run(**request)["jobRunId"])
    except (ClientError, BotoCoreError) as exc:
        raise _explain(exc, "StartJobRun refused") from exc

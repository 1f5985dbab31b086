"""`consumer pipeline submit` against moto's server (S3, EMR Serverless, CloudFormation) on a
loopback port: it finds the application and the job role the way a deployed environment offers
them, uploads each archive once under its content hash, and starts a run whose request is the one
the job needs. Bad input stops with one line naming the fix. No network: the interpreter and the
wheel are built by the test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.emr_fixtures import fake_interpreter, tiny_wheel
from tests.support import free_port, moto_server
from tools.cli import main

REPO = Path(__file__).resolve().parents[3]
REGION = "eu-west-1"  # prod's
BUCKET = "orders-stream-consumer-prod-changelog"
STACK = "orders-stream-consumer-prod"
APPLICATION = "orders-stream-consumer-prod-pipeline"
ROLE = "arn:aws:iam::123456789012:role/orders-stream-consumer-prod-PipelineJobRole"


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto on a free loopback port (stopped even when the test fails), and this process's
    clients pointed at it through AWS_ENDPOINT_URL, as the subprocess's are."""
    with moto_server() as url:
        for name, value in _aws_environment(url).items():
            monkeypatch.setenv(name, value)
        yield url


def _aws_environment(url: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """config/ copied, a fake interpreter and a wheel directory, as the working directory."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    fake_interpreter(tmp_path / "cpython-3.11-install_only.tar.gz")
    tiny_wheel(tmp_path / "wheels")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _client(service: str, url: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=url)


def _deployed(url: str, *, bucket: bool = True, application: bool = True, role_output: bool = True) -> str:
    """What `cdk deploy --env prod` leaves behind, as far as submit looks: the bucket, the
    application (by its name) and the fleet stack's EmrJobRoleArn output."""
    if bucket:
        _client("s3", url).create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
    app_id = ""
    if application:
        app_id = _client("emr-serverless", url).create_application(
            name=APPLICATION, releaseLabel="emr-7.5.0", type="SPARK", architecture="X86_64"
        )["applicationId"]
    if role_output:
        template = {
            "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {"EmrJobRoleArn": {"Value": ROLE}},
        }
        _client("cloudformation", url).create_stack(StackName=STACK, TemplateBody=json.dumps(template))
    return str(app_id)


def _submit_args(project: Path, *extra: str) -> list[str]:
    return [
        "pipeline", "submit", "--env", "prod", "--config-dir", "config",
        "--python-dist", str(project / "cpython-3.11-install_only.tar.gz"),
        "--wheels", str(project / "wheels"), "--build-dir", str(project / "build"), *extra,
    ]  # fmt: skip


def _run_cli(project: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **_aws_environment(url), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "tools.cli", *args],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _runs(url: str, app_id: str) -> list[dict[str, Any]]:
    emr = _client("emr-serverless", url)
    try:
        return list(emr.list_job_runs(applicationId=app_id)["jobRuns"])
    except emr.exceptions.ResourceNotFoundException:  # moto's answer for an application never run
        emr.get_application(applicationId=app_id)  # (the application itself does exist)
        return []


def _artifacts(url: str) -> dict[str, str]:
    listing = _client("s3", url).list_objects_v2(Bucket=BUCKET, Prefix="emr/artifacts/")
    return {item["Key"].split("/")[-1].split("-")[0]: item["Key"] for item in listing.get("Contents", [])}


def test_submit_uploads_once_and_starts_the_run_the_job_needs(endpoint: str, project: Path) -> None:
    app_id = _deployed(endpoint)
    done = _run_cli(project, endpoint, *_submit_args(project, "snapshot", "--full"))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split("job run ")[1].split()[0]
    assert f"--application-id {app_id} --job-run-id {run_id}" in done.stdout  # how to follow it
    assert done.stdout.count("uploaded: s3://") == 4

    keys = _artifacts(endpoint)
    assert set(keys) == {"entry", "code", "config", "environment"}
    s3 = _client("s3", endpoint)
    local = project / "downloaded"
    local.mkdir()
    for name, key in keys.items():
        s3.download_file(BUCKET, key, str(local / name))
    with zipfile.ZipFile(local / "code") as code:
        assert "pipeline/jobs.py" in code.namelist() and "ground/settings/__init__.py" in code.namelist()
    with zipfile.ZipFile(local / "config") as config:
        assert sorted(config.namelist()) == ["base.yaml", "prod.yaml"]
    with tarfile.open(local / "environment") as environment:
        names = environment.getnames()
        assert "bin/python3" in names and "lib/python3.11/site-packages/tinypkg/__init__.py" in names
    assert b"from pipeline.jobs import main" in (local / "entry").read_bytes()

    run = _client("emr-serverless", endpoint).get_job_run(applicationId=app_id, jobRunId=run_id)["jobRun"]
    assert run["executionRole"] == ROLE
    driver = run["jobDriver"]["sparkSubmit"]
    uri = {name: f"s3://{BUCKET}/{key}" for name, key in keys.items()}
    assert driver["entryPoint"] == uri["entry"]
    assert driver["entryPointArguments"] == [
        "snapshot",
        "--env",
        "prod",
        "--config-dir",
        "./config",
        "--full",
    ]
    parameters = driver["sparkSubmitParameters"]
    assert f"--py-files {uri['code']} " in parameters
    assert f"spark.archives={uri['environment']}#environment,{uri['config']}#config" in parameters
    for variable in (
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON",
        "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON",
        "spark.executorEnv.PYSPARK_PYTHON",
    ):
        assert f"--conf {variable}=./environment/bin/python3" in parameters
    logs = run["configurationOverrides"]["monitoringConfiguration"]["s3MonitoringConfiguration"]
    assert logs["logUri"] == f"s3://{BUCKET}/emr/logs/"

    # Nothing changed: nothing uploaded again, one more run started.
    again = _run_cli(project, endpoint, *_submit_args(project, "verify"))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already there: s3://") == 4 and "uploaded:" not in again.stdout
    assert _artifacts(endpoint) == keys
    assert len(_runs(endpoint, app_id)) == 2


def test_dry_run_prints_the_uploads_and_the_request_and_calls_no_aws(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A closed port: any AWS call would fail.
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    code = main(_submit_args(project, "stats", "--dry-run"))
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("would upload ") == 4
    request = json.loads(out[out.index("{") :])
    assert request["applicationId"] == f"<EmrApplicationId of {STACK}>"
    assert request["jobDriver"]["sparkSubmit"]["entryPointArguments"][0] == "stats"
    assert (
        f"s3://{BUCKET}/emr/artifacts/code-" in request["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    )


def _error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 1, err
    return err.strip().splitlines()[-1]


def test_no_application_is_named_with_the_fix(
    endpoint: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _deployed(endpoint, application=False)
    line = _error(_submit_args(project, "snapshot"), capsys)
    assert f"no EMR Serverless application {APPLICATION} in {REGION}" in line
    assert "pipeline.emr_serverless: true" in line and "--application-id" in line
    line = _error(_submit_args(project, "snapshot", "--application-id", "00nope"), capsys)
    assert "application 00nope not found" in line


def test_no_job_role_output_is_named_with_the_fix(
    endpoint: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _deployed(endpoint, role_output=False)
    line = _error(_submit_args(project, "snapshot"), capsys)
    assert f"no job role: stack {STACK} has no EmrJobRoleArn output" in line and "--job-role-arn" in line


def test_a_missing_bucket_is_named_before_anything_is_started(
    endpoint: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app_id = _deployed(endpoint, bucket=False)
    line = _error(_submit_args(project, "snapshot"), capsys)
    assert f"bucket {BUCKET} does not exist: deploy the data stack" in line
    assert _runs(endpoint, app_id) == []


def test_an_environment_without_emr_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _submit_args(project, "snapshot")
    args[args.index("prod")] = "dev"
    line = _error(args, capsys)
    assert (
        "pipeline.emr_serverless is false for env dev" in line
        and "consumer pipeline snapshot --env dev" in line
    )

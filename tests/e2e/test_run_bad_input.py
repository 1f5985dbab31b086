"""`consumer run` refuses bad input at start-up: one line on stderr naming the fix (after the line
saying which environment and files were loaded), no traceback, a non-zero exit, and no lease taken
or checkpoint touched."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tools.commands import ExitCode

pytestmark = pytest.mark.e2e


def run(
    config_dir: Path,
    timeout: float = 240,
    extra_env: dict[str, str] | None = None,
    without: tuple[str, ...] = (),
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in without}
    env.update(extra_env or {})
    if cwd is not None:  # the repository stays importable (the processors the tests name live there)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return subprocess.run(
        [sys.executable, "-m", "tools.cli", "run", "--env", "e2e", "--config-dir", str(config_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        cwd=cwd,
    )


def the_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line: stderr is the environment line, then that line, and nothing else."""
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("env e2e from "), result.stderr
    assert lines[1].startswith("error: "), result.stderr
    return lines[1]


def set_processing(config_dir: Path, block: str) -> None:
    text = (config_dir / "e2e.yaml").read_text()
    start = text.index("processing:")
    end = text.index("load:")
    (config_dir / "e2e.yaml").write_text(text[:start] + block + text[end:])


def create_source_table(endpoint: str) -> None:
    boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint).create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def leases_table_exists(endpoint: str) -> bool:
    names = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint).list_tables()[
        "TableNames"
    ]
    return "e2e-fleet" in names


def test_missing_table(config_dir: Path, moto_endpoint: str) -> None:
    result = run(config_dir)
    assert result.returncode == ExitCode.UNAVAILABLE
    error = the_error(result)
    assert "table orders does not exist" in error
    assert "create the tables env e2e names: `consumer local up --env e2e`" in error
    assert not leases_table_exists(moto_endpoint)


def test_table_without_stream(config_dir: Path, moto_endpoint: str) -> None:
    boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_endpoint).create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    result = run(config_dir)
    assert result.returncode == ExitCode.UNAVAILABLE
    assert "--stream-specification StreamEnabled=true" in the_error(result)
    assert not leases_table_exists(moto_endpoint)


def test_processor_that_does_not_import(config_dir: Path, moto_endpoint: str) -> None:
    text = (
        (config_dir / "e2e.yaml")
        .read_text()
        .replace("processor: changelog", "processor: no_such_module:Processor")
    )
    (config_dir / "e2e.yaml").write_text(text)
    result = run(config_dir, cwd=config_dir.parent)
    assert result.returncode == ExitCode.CONFIG
    error = the_error(result)
    assert "module no_such_module does not import" in error
    # It says where it looked: the working directory (processing.import_paths' default).
    assert f"no no_such_module.py in {config_dir.parent.resolve()} (processing.import_paths)" in error
    assert not leases_table_exists(moto_endpoint)


def test_processor_from_the_working_directory(config_dir: Path, moto_endpoint: str) -> None:
    """A processor in the project `consumer run` is started from imports without PYTHONPATH."""
    project = config_dir.parent
    (project / "myproc").mkdir()
    (project / "myproc" / "__init__.py").write_text("")
    (project / "myproc" / "counter.py").write_text("def handle(batch):\n    return None\n")
    set_processing(config_dir, "processing:\n  processor: myproc.counter:handle\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.cli",
            "config",
            "validate",
            "--env",
            "e2e",
            "--config-dir",
            str(config_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=project,
    )
    assert result.returncode == 0, result.stderr
    assert "processor myproc.counter:handle" in result.stdout
    # And `run` gets past the processor to the next missing thing, the table.
    result = run(config_dir, cwd=project)
    assert "table orders does not exist" in the_error(result)


def test_misspelt_built_in(config_dir: Path, moto_endpoint: str) -> None:
    set_processing(config_dir, "processing:\n  processor: changelogg\n")
    result = run(config_dir)
    assert result.returncode == ExitCode.CONFIG
    assert "is not a built-in (changelog, dynamodb_replica); did you mean 'changelog'?" in the_error(result)
    assert not leases_table_exists(moto_endpoint)


def test_options_left_by_another_processor_are_not_inherited(config_dir: Path, moto_endpoint: str) -> None:
    """e2e.yaml gives the changelog sink a destination; naming a function processor in a variable
    must not hand that destination to the function (it used to: "cannot be passed to the function")."""
    create_source_table(moto_endpoint)  # no stream: start-up stops after the processor was accepted
    result = run(config_dir, extra_env={"CONSUMER_PROCESSING__PROCESSOR": "examples.function_form:handle"})
    error = the_error(result)
    assert "cannot be passed" not in error and "has no stream enabled" in error


def test_options_that_do_not_fit_name_the_key(config_dir: Path, moto_endpoint: str) -> None:
    set_processing(
        config_dir, "processing:\n  processor: examples.function_form:handle\n  options: {destination: x}\n"
    )
    result = run(config_dir)
    assert result.returncode == ExitCode.CONFIG
    error = the_error(result)
    assert "processing.options ['destination'] cannot be passed to the function" in error
    assert "remove processing.options" in error


def test_no_credentials_needed_for_a_local_endpoint(config_dir: Path, moto_endpoint: str) -> None:
    """No AWS credentials anywhere: the local endpoint gets dummy ones (the run then stops at the
    missing table, which proves the requests were signed and answered)."""
    result = run(
        config_dir,
        without=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"),
    )
    assert "Unable to locate credentials" not in result.stderr
    assert "dummy AWS credentials for the local endpoint" in result.stderr.splitlines()[0]
    assert "table orders does not exist" in the_error(result)


def test_emulator_down(config_dir: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    text = (config_dir / "e2e.yaml").read_text()
    endpoint = next(line for line in text.splitlines() if line.startswith("endpoint_url:"))
    (config_dir / "e2e.yaml").write_text(text.replace(endpoint, f"endpoint_url: http://127.0.0.1:{port}"))
    result = run(config_dir)
    assert result.returncode == ExitCode.UNAVAILABLE
    error = the_error(result)
    assert f"nothing answers at http://127.0.0.1:{port}" in error
    assert "start the emulator: `consumer local up --env e2e`" in error

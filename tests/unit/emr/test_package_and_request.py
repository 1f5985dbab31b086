"""The pure parts of `consumer pipeline submit`: what each archive holds, that an unchanged input
gives the same bytes (so the same content-hashed key, so no second upload), that bad inputs are
refused by name, and the StartJobRun request the job needs on EMR Serverless."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from ground.settings import load_settings
from tests.emr_fixtures import fake_interpreter, tiny_wheel
from tools.emr import fetch, package, request

REPO = Path(__file__).resolve().parents[3]


def test_the_code_archive_holds_what_the_job_imports_and_nothing_else(tmp_path: Path) -> None:
    artifact = package.build_code_zip(REPO, tmp_path / "code.zip")
    names = set(package.archive_members(artifact.path))
    assert {
        "pipeline/__init__.py",
        "pipeline/jobs.py",
        "pipeline/session.py",
        "pipeline/table_scan.py",
    } <= names
    assert {"ground/__init__.py", "ground/settings/__init__.py"} <= names  # pipeline imports the settings
    # ... every module of the settings package (the root model imports each part's).
    assert {f"ground/settings/{p.name}" for p in (REPO / "ground" / "settings").glob("*.py")} <= names
    # The worker, the tools, the emulator and the infra are not part of a Spark job.
    assert not any(n.startswith(("consumer/", "tools/", "emulator/", "infra/")) for n in names)


def test_the_import_closure_follows_relative_and_function_level_imports(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "pipeline" / "sub").mkdir(parents=True)
    (root / "ground").mkdir()
    (root / "pipeline" / "__init__.py").write_text("")
    (root / "pipeline" / "sub" / "__init__.py").write_text("from . import helper\n")
    (root / "pipeline" / "sub" / "helper.py").write_text("X = 1\n")
    (root / "pipeline" / "jobs.py").write_text(
        "import os\nfrom pipeline.sub import thing\n\ndef later():\n    from ground import settings\n"
    )
    (root / "ground" / "__init__.py").write_text("")
    (root / "ground" / "settings.py").write_text("import yaml\n")
    (root / "ground" / "unused.py").write_text("")
    files = [p.as_posix() for p in package.code_files(root)]
    assert files == [
        "ground/__init__.py",
        "ground/settings.py",
        "pipeline/__init__.py",
        "pipeline/jobs.py",
        "pipeline/sub/__init__.py",
        "pipeline/sub/helper.py",
    ]


def test_the_config_archive_holds_base_and_the_one_environment(tmp_path: Path) -> None:
    artifact = package.build_config_zip(REPO / "config", "prod", tmp_path / "config.zip")
    assert sorted(package.archive_members(artifact.path)) == ["base.yaml", "prod.yaml"]
    with pytest.raises(package.PackageError, match="nope.yaml does not exist"):
        package.build_config_zip(REPO / "config", "nope", tmp_path / "other.zip")


def test_the_environment_is_the_interpreter_rerooted_plus_the_wheels(tmp_path: Path) -> None:
    interpreter = fake_interpreter(tmp_path / "cpython.tar.gz")
    wheel = tiny_wheel(tmp_path / "wheels")
    artifact = package.build_environment(interpreter, [wheel], tmp_path / "environment.tar.gz")
    with tarfile.open(artifact.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        # ./environment/bin/python3 once Spark unpacks it as #environment.
        assert members["bin/python3"].issym() and members["bin/python3"].linkname == "python3.11"
        assert members["bin/python3.11"].mode & 0o111
        site = "lib/python3.11/site-packages"
        assert f"{site}/tinypkg/__init__.py" in members
        assert f"{site}/tinypkg_extra.py" in members  # .data/purelib is installed into site-packages
        assert f"{site}/tinypkg-1.0.dist-info/METADATA" in members
        assert not any("scripts" in name or name.startswith("python/") for name in members)
        assert tar.extractfile(f"{site}/tinypkg/__init__.py").read() == b"VALUE = 42\n"  # type: ignore[union-attr]
    assert package.ENVIRONMENT_PYTHON == "./environment/bin/python3"


def test_the_same_inputs_give_the_same_bytes_and_key(tmp_path: Path) -> None:
    interpreter = fake_interpreter(tmp_path / "cpython.tar.gz")
    wheel = tiny_wheel(tmp_path / "wheels")
    for folder in "abc":
        (tmp_path / folder).mkdir()
    first = package.build_environment(interpreter, [wheel], tmp_path / "a" / "environment.tar.gz")
    second = package.build_environment(interpreter, [wheel], tmp_path / "b" / "environment.tar.gz")
    assert first.path.read_bytes() == second.path.read_bytes()
    assert first.key("emr/artifacts") == second.key("emr/artifacts")
    assert first.key("emr/artifacts").startswith("emr/artifacts/environment-")
    assert first.key("emr/artifacts").endswith(".tar.gz")
    code_a = package.build_code_zip(REPO, tmp_path / "a" / "code.zip")
    code_b = package.build_code_zip(REPO, tmp_path / "b" / "code.zip")
    assert code_a.digest == code_b.digest
    # Another wheel: another key.
    other = tiny_wheel(tmp_path / "more", name="otherpkg")
    third = package.build_environment(interpreter, [wheel, other], tmp_path / "c" / "environment.tar.gz")
    assert third.key("emr/artifacts") != first.key("emr/artifacts")


def test_an_old_python_or_a_foreign_archive_is_refused_by_name(tmp_path: Path) -> None:
    wheel = tiny_wheel(tmp_path / "wheels")
    old = fake_interpreter(tmp_path / "py39.tar.gz", version="3.9")
    with pytest.raises(package.PackageError, match=r"Python 3\.9, but the pipeline needs 3\.11"):
        package.build_environment(old, [wheel], tmp_path / "env.tar.gz")
    foreign = tmp_path / "foreign.tar.gz"
    with tarfile.open(foreign, "w:gz") as tar:
        tar.add(wheel, arcname="something.whl")
    with pytest.raises(package.PackageError, match="no bin/python3 inside"):
        package.build_environment(foreign, [wheel], tmp_path / "env.tar.gz")
    not_tar = tmp_path / "not.tar.gz"
    not_tar.write_bytes(b"hello")
    with pytest.raises(package.PackageError, match="not a readable tar archive"):
        package.inspect_interpreter(not_tar)
    good = fake_interpreter(tmp_path / "py311.tar.gz")
    with pytest.raises(package.PackageError, match="no wheels given"):
        package.build_environment(good, [], tmp_path / "env.tar.gz")
    broken = tmp_path / "wheels" / "broken-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(package.PackageError, match="not a wheel"):
        package.build_environment(good, [wheel, broken], tmp_path / "env.tar.gz")


def test_the_real_download_asks_pip_for_the_applications_platform_not_this_machines(tmp_path: Path) -> None:
    command = fetch.pip_download_command(tmp_path, "X86_64", constraints=REPO / "requirements.txt")
    assert command[1:4] == ["-m", "pip", "download"]
    assert "--only-binary=:all:" in command
    platforms = [command[i + 1] for i, part in enumerate(command) if part == "--platform"]
    assert platforms and all(p.endswith("_x86_64") and p.startswith("manylinux") for p in platforms)
    assert command[command.index("--python-version") + 1] == "3.11"
    assert command[command.index("--implementation") + 1] == "cp"
    assert command[command.index("--constraint") + 1] == str(REPO / "requirements.txt")
    assert command[-len(package.REQUIREMENTS) :] == list(package.REQUIREMENTS)
    assert "pyspark" not in {r.lower() for r in package.REQUIREMENTS}  # EMR brings its own
    arm = fetch.pip_download_command(tmp_path, "ARM64")
    assert all(arm[i + 1].endswith("_aarch64") for i, part in enumerate(arm) if part == "--platform")
    assert fetch.interpreter_url("X86_64").endswith("x86_64-unknown-linux-gnu-install_only.tar.gz")
    assert "cpython-3.11." in fetch.interpreter_url("ARM64")
    with pytest.raises(package.PackageError, match="EMR architecture 'SPARC'"):
        fetch.interpreter_url("SPARC")


def test_a_local_interpreter_path_is_used_as_is_and_a_missing_one_named(tmp_path: Path) -> None:
    interpreter = fake_interpreter(tmp_path / "cpython.tar.gz")
    assert fetch.download_interpreter(str(interpreter), tmp_path / "cache") == interpreter
    with pytest.raises(package.PackageError, match="--python-dist .*missing.tar.gz: no such file"):
        fetch.download_interpreter(str(tmp_path / "missing.tar.gz"), tmp_path / "cache")


def test_the_start_job_run_request() -> None:
    settings = load_settings("prod", REPO / "config")
    uploaded = request.Uploaded(
        entry_point="s3://b/emr/artifacts/entry-1.py",
        code="s3://b/emr/artifacts/code-2.zip",
        config="s3://b/emr/artifacts/config-3.zip",
        environment="s3://b/emr/artifacts/environment-4.tar.gz",
    )
    built = request.start_job_run_request(
        settings,
        "snapshot",
        application_id="00abc",
        job_role_arn="arn:aws:iam::123456789012:role/job",
        uploaded=uploaded,
        log_uri="s3://b/emr/logs/",
        arguments=request.job_arguments("snapshot", "prod", full=True, tolerate_bad_lines=3),
        client_token="token",
    )
    assert built["applicationId"] == "00abc" and built["executionRoleArn"].endswith(":role/job")
    assert built["name"] == "orders-stream-consumer-prod-pipeline-snapshot"
    driver = built["jobDriver"]["sparkSubmit"]
    assert driver["entryPoint"] == uploaded.entry_point
    assert driver["entryPointArguments"] == [
        "snapshot",
        "--env",
        "prod",
        "--config-dir",
        "./config",
        "--full",
        "--tolerate-bad-lines",
        "3",
    ]
    assert driver["sparkSubmitParameters"].split(" ") == [
        "--py-files", uploaded.code,
        "--conf", f"spark.archives={uploaded.environment}#environment,{uploaded.config}#config",
        "--conf", "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=./environment/bin/python3",
        "--conf", "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python3",
        "--conf", "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python3",
    ]  # fmt: skip
    logs = built["configurationOverrides"]["monitoringConfiguration"]["s3MonitoringConfiguration"]
    assert logs == {"logUri": "s3://b/emr/logs/"}
    with pytest.raises(ValueError, match="expected one of snapshot, bootstrap, stats, verify"):
        request.job_arguments("compact", "prod")
    assert request.job_arguments("bootstrap", "prod", export="s3://e/AWSDynamoDB/01-x")[-2:] == [
        "--export",
        "s3://e/AWSDynamoDB/01-x",
    ]
    assert request.job_arguments("bootstrap", "prod", segments=8)[-2:] == ["--segments", "8"]
    with pytest.raises(ValueError, match="cannot hold spaces"):
        request.spark_submit_parameters(uploaded, {"spark.x": "a b"})


def test_the_names_submit_looks_for_are_the_ones_the_stack_gives() -> None:
    pytest.importorskip("aws_cdk")
    from infra import pipeline_resources
    from infra.stack import stack_name
    from tools.commands import pipeline as command

    settings = load_settings("prod", REPO / "config")
    assert request.stack_name(settings) == stack_name(settings)
    assert pipeline_resources.application_name(settings) == request.application_name(settings)
    assert command.EMR_ARCHITECTURE == pipeline_resources.EMR_ARCHITECTURE

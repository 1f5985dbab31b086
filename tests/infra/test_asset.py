"""The CDK asset instances receive: what the systemd units need and nothing else.

* the staged asset is the allow-list of infra.asset (product, processors, config, the bootstrap in
  deploy/, the project files) plus the locked wheelhouse: no tests, docs, README, emulator,
  pipeline, caches;
* a processor the scaffold writes into ``processors/`` is in the asset, and ``consumer run`` started
  in the unpacked asset (as the unit is: ``WorkingDirectory`` is the asset) delivers records to it;
* the asset's hash, which names the object the launch template downloads, moves with code, config
  and dependencies, and not with a README or docs edit.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import boto3
import pytest

from infra.application import ASSET_INCLUDE
from infra.asset import ASSET_STAGED
from infra.user_data import SOURCE_DIR
from infra.wheelhouse import PRODUCT_PACKAGES
from tests.infra.conftest import REPO, Synthesized, instance_units, resolve_join, resources_of
from tests.support import create_orders_table, moto_server

pytestmark = pytest.mark.infra

NEVER_SHIPPED = {"tests", "docs", "README.md", "emulator", "pipeline", "infra", "bench", ".venv", "cdk.out"}


def staged_asset(synth: Synthesized) -> tuple[str, Path]:
    """(hash, directory) of the fleet's source asset in the cloud assembly."""
    # The fleet's (stateless) stack carries the asset.
    name = f"{synth.settings.application_name}-{synth.settings.env}"
    files = json.loads((synth.assembly_dir / f"{name}.assets.json").read_text())["files"]
    (asset_hash,) = [h for h, f in files.items() if f["source"].get("packaging") == "zip"]
    return asset_hash, synth.assembly_dir / files[asset_hash]["source"]["path"]


def all_names(directory: Path) -> set[str]:
    return {p.name for p in directory.rglob("*")}


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A user's clone: the shipped parts of this repository plus a README, docs and a test, and a
    processor written by the real scaffold (``consumer new processor audit``)."""
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (*PRODUCT_PACKAGES, "config", "deploy"):
        shutil.copytree(REPO / name, repo / name, ignore=ignore)
    for name in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(REPO / name, repo / name)
    (repo / "docs").mkdir()
    shutil.copy(REPO / "docs" / "deploy.md", repo / "docs" / "deploy.md")
    scaffold = subprocess.run(
        [sys.executable, "-m", "tools.cli", "new", "processor", "audit"],
        cwd=repo,
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    assert (repo / "processors" / "audit.py").is_file() and (repo / "tests" / "test_audit.py").is_file()
    return repo


def _clean_environment() -> dict[str, str]:
    dropped = ("AWS_", "CONSUMER_", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def test_the_asset_holds_what_instances_need_and_nothing_else(synthesized: dict[str, Synthesized]) -> None:
    synth = synthesized["prod"]
    asset_hash, directory = staged_asset(synth)
    top = {p.name for p in directory.iterdir()}
    assert top <= set(ASSET_INCLUDE) | set(ASSET_STAGED), top
    assert {"ground", "consumer", "tools", "config", "deploy", "wheelhouse", "pyproject.toml", "requirements.txt"} <= top
    assert (directory / "tools" / "cli.py").is_file()
    assert (directory / "config" / f"{synth.settings.env}.yaml").is_file()
    assert not all_names(directory) & (NEVER_SHIPPED | {"__pycache__"})
    # The launch template downloads exactly this object.
    (template,) = resources_of(synth.raw, "AWS::EC2::LaunchTemplate")
    assert f"{asset_hash}.zip" in resolve_join(template["LaunchTemplateData"]["UserData"]["Fn::Base64"])


def test_a_processor_in_processors_ships_and_runs_from_the_unpacked_asset(
    repository: Path, tmp_path: Path
) -> None:
    from infra.application import build_app

    # The user's clone is the asset's source, as this repository is for `cdk deploy`.
    app, stack = build_app(
        "prod", config_dir=repository / "config", outdir=tmp_path / "out", source_path=repository
    )
    assembly = app.synth()  # cdk-nag runs here too
    raw = assembly.get_stack_by_name(stack.stack_name).template
    asset = Path(assembly.directory) / f"asset.{stack.fleet.asset.asset_hash}"
    assert (asset / "processors" / "audit.py").read_text() == (
        repository / "processors" / "audit.py"
    ).read_text()
    assert (asset / "processors" / "__init__.py").is_file()
    assert not all_names(asset) & NEVER_SHIPPED  # not the processor's test, not the README
    # The unit runs `consumer run` with the unpacked asset as its working directory.
    (template,) = resources_of(raw, "AWS::EC2::LaunchTemplate")
    user_data = resolve_join(template["LaunchTemplateData"]["UserData"]["Fn::Base64"])
    assert f"WorkingDirectory={SOURCE_DIR}" in instance_units(raw)["consumer-worker@.service"]
    assert f"{stack.fleet.asset.asset_hash}.zip" in user_data

    # From the unpacked asset, as on an instance: the processor imports and receives records.
    env = _clean_environment()
    validate = [sys.executable, "-m", "tools.cli", "config", "validate", "--env", "audit"]
    ok = subprocess.run(
        validate, cwd=asset, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # Elsewhere (no processors/ on the path) the same configuration does not import: the asset is
    # what makes it importable.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for package in ("ground", "consumer", "tools"):
        shutil.copytree(asset / package, elsewhere / package)
    bad = subprocess.run(
        [*validate, "--config-dir", str(asset / "config")],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode != 0 and "processors" in bad.stdout + bad.stderr
    _run_from(asset, env, tmp_path)


def _run_from(asset: Path, env: dict[str, str], tmp_path: Path) -> None:
    """`consumer run --env audit` in ``asset`` against moto; five records reach the processor."""
    with moto_server() as endpoint:
        env = {
            **env,
            "CONSUMER_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        ddb = boto3.client(
            "dynamodb",
            region_name="us-east-1",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        create_orders_table(ddb, "orders")
        for n in range(1, 6):
            ddb.put_item(TableName="orders", Item={"pk": {"S": f"item-{n}"}, "sk": {"S": "v1"}})
        output = asset / "var" / "audit.jsonl"
        log_path = tmp_path / "worker.log"
        with _worker(asset, env, log_path):
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and _lines(output) < 5:
                time.sleep(0.2)
            assert _lines(output) == 5, log_path.read_text()[-3000:]
        keys = sorted(json.loads(line)["keys"]["pk"] for line in output.read_text().splitlines())
        assert keys == [f"item-{n}" for n in range(1, 6)]


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@contextmanager
def _worker(cwd: Path, env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``consumer run --env audit`` in ``cwd``; stopped (SIGTERM, then SIGKILL) whatever happens."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tools.cli", "run", "--env", "audit"],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def _asset_hash(repository: Path, outdir: Path) -> str:
    from infra.application import build_app

    _, stack = build_app("dev", config_dir=repository / "config", outdir=outdir, source_path=repository)
    return str(stack.fleet.asset.asset_hash)


def test_the_asset_hash_moves_with_code_config_and_dependencies_only(
    repository: Path, tmp_path: Path
) -> None:
    before = _asset_hash(repository, tmp_path / "0")
    (repository / "README.md").write_text("# a rewritten README\n")
    (repository / "docs" / "deploy.md").write_text("new docs\n")
    (repository / "tests" / "test_audit.py").write_text("def test_more() -> None:\n    pass\n")
    assert _asset_hash(repository, tmp_path / "1") == before

    processor = repository / "processors" / "audit.py"
    processor.write_text(processor.read_text() + "\n# a change to the processor\n")
    after_processor = _asset_hash(repository, tmp_path / "2")
    assert after_processor != before

    with (repository / "config" / "dev.yaml").open("a") as handle:
        handle.write("\n# a config change\n")
    after_config = _asset_hash(repository, tmp_path / "3")
    assert after_config != after_processor

    with (repository / "requirements.txt").open("a") as handle:
        handle.write("\n# a dependency change\n")
    assert _asset_hash(repository, tmp_path / "4") != after_config

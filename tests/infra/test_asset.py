"""The CDK asset instances receive: what the environment runs and nothing else.

* the staged asset holds the product (``infra.asset.PRODUCT_INCLUDE``), the environment's own
  generated configuration (one file), the processors it names and the locked wheelhouse: no tests,
  docs, README, emulator, pipeline, other environments, other processors, caches;
* a processor prod names ships, and ``consumer run`` started in the unpacked asset (as the unit is:
  ``WorkingDirectory`` is the asset) delivers records to it;
* prod's templates are byte-identical after edits to dev.yaml, a local-only YAML, a comment in
  prod.yaml, docs, tests and a processor prod does not use; an alarm threshold changes the
  template but not the launch template (in place); a worker setting or the processor prod uses
  changes the launch template (new instances).
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
import yaml

from infra.asset import ASSET_STAGED, PRODUCT_INCLUDE
from infra.product_wheel import PRODUCT_PACKAGES
from infra.user_data import SOURCE_DIR
from tests.infra.conftest import (
    REPO,
    Synthesized,
    deployable_config,
    edit_yaml,
    instance_units,
    resolve_join,
    resources_of,
    synthesize,
)
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


def _clean_environment() -> dict[str, str]:
    dropped = ("AWS_", "CONSUMER_", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def _scaffold(repo: Path, name: str) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "tools.cli", "new", "processor", name],
        cwd=repo,
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A user's clone: the shipped parts of this repository with the fixture's per-account values,
    a README, docs, and two processors written by the real scaffold (``consumer new processor``):
    ``audit``, which prod runs, and ``windows``, which only its own local environment uses."""
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (*PRODUCT_PACKAGES, "deploy"):
        shutil.copytree(REPO / name, repo / name, ignore=ignore)
    deployable_config(repo)
    for name in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(REPO / name, repo / name)
    (repo / "docs").mkdir()
    shutil.copy(REPO / "docs" / "deploy.md", repo / "docs" / "deploy.md")
    for name in ("audit", "windows"):
        _scaffold(repo, name)
    (repo / "processors" / "audit_format.py").write_text(
        "def line(record: object) -> str:\n    return str(record)\n"
    )
    audit = repo / "processors" / "audit.py"
    audit.write_text(audit.read_text() + "\nfrom processors import audit_format  # noqa: E402,F401\n")
    edit_yaml(
        repo / "config" / "prod.yaml",
        {
            "processing.processor": "processors.audit:Processor",
            "processing.options": {"output": "var/audit.jsonl"},
            "processing.dead_letter": {"type": "none"},
            "metrics.destination": "logs",
        },
    )
    return repo


def test_the_asset_holds_what_instances_need_and_nothing_else(synthesized: dict[str, Synthesized]) -> None:
    synth = synthesized["prod"]
    asset_hash, directory = staged_asset(synth)
    top = {p.name for p in directory.iterdir()}
    assert top == {*PRODUCT_INCLUDE, *ASSET_STAGED} - {"processors"}, top  # a built-in sink: no code
    assert (directory / "tools" / "cli.py").is_file()
    # One configuration: prod's, generated, with only what workers read (no fleet, no alarms).
    assert [p.name for p in (directory / "config").iterdir()] == ["prod.yaml"]
    shipped = yaml.safe_load((directory / "config" / "prod.yaml").read_text())
    assert {"fleet", "scaling", "emulator", "load"}.isdisjoint(shipped)
    assert shipped["account"] == synth.settings.account and shipped["region"] == synth.settings.region
    assert shipped["processing"]["options"]["destination"] == synth.settings.processing.options["destination"]
    assert not all_names(directory) & (NEVER_SHIPPED | {"__pycache__"})
    # The launch template downloads exactly this object.
    (template,) = resources_of(synth.raw, "AWS::EC2::LaunchTemplate")
    assert f"{asset_hash}.zip" in resolve_join(template["LaunchTemplateData"]["UserData"]["Fn::Base64"])


def test_the_processor_prod_names_ships_and_runs_from_the_unpacked_asset(
    repository: Path, tmp_path: Path
) -> None:
    prod = synthesize("prod", tmp_path / "out", config_dir=repository / "config", source_path=repository)
    _, asset = staged_asset(prod)
    processors = sorted(p.name for p in (asset / "processors").iterdir())
    # The named module, the module it imports, the package's __init__: not windows.py, not tests.
    assert processors == ["__init__.py", "audit.py", "audit_format.py"], processors
    assert (asset / "processors" / "audit.py").read_text() == (
        repository / "processors" / "audit.py"
    ).read_text()
    assert [p.name for p in (asset / "config").iterdir()] == ["prod.yaml"]
    assert not all_names(asset) & NEVER_SHIPPED
    # The unit runs `consumer run` with the unpacked asset as its working directory.
    assert f"WorkingDirectory={SOURCE_DIR}" in instance_units(prod.raw)["consumer-worker@.service"]

    # From the unpacked asset, as on an instance: the processor imports and receives records.
    env = _clean_environment()
    validate = [sys.executable, "-m", "tools.cli", "config", "validate", "--env", "prod"]
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
    _run_from(asset, env, tmp_path, prod.settings.region)


def _run_from(asset: Path, env: dict[str, str], tmp_path: Path, region: str) -> None:
    """`consumer run --env prod` in ``asset`` against moto; five records reach the processor."""
    with moto_server() as endpoint:
        env = {
            **env,
            "CONSUMER_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        ddb = boto3.client(
            "dynamodb",
            region_name=region,
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
    """``consumer run --env prod`` in ``cwd``; stopped (SIGTERM, then SIGKILL) whatever happens."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tools.cli", "run", "--env", "prod"],
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


def _templates(synth: Synthesized) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in synth.template_paths}


def _launch_template(synth: Synthesized) -> str:
    (template,) = resources_of(synth.raw, "AWS::EC2::LaunchTemplate")
    return json.dumps(template, sort_keys=True)


def test_prod_changes_only_with_what_prod_runs(repository: Path, tmp_path: Path) -> None:
    config = repository / "config"

    def prod(label: str) -> Synthesized:
        return synthesize("prod", tmp_path / label, config_dir=config, source_path=repository)

    before = prod("before")
    # Everything prod does not run: another environment, a local-only environment (written by the
    # scaffold), a comment in prod's own file, docs, the README, tests, a processor prod does not name.
    with (config / "dev.yaml").open("a") as handle:
        handle.write("\nlogs: {retention_days: 3}\n")
    with (config / "windows.yaml").open("a") as handle:
        handle.write("\n# a local-only comment\n")
    with (config / "prod.yaml").open("a") as handle:
        handle.write("\n# a comment in prod.yaml\n")
    (repository / "docs" / "deploy.md").write_text("new docs\n")
    (repository / "README.md").write_text("# a rewritten README\n")
    (repository / "tests" / "test_audit.py").write_text("def test_more() -> None:\n    pass\n")
    windows = repository / "processors" / "windows.py"
    windows.write_text(windows.read_text() + "\n# an edit to a processor prod does not use\n")
    unrelated = prod("unrelated")
    assert _templates(unrelated) == _templates(before)

    # An alarm threshold, the group's size, the logs' retention, the leases table's capacity: the
    # stack changes them in place; the instances stay.
    edit_yaml(
        config / "prod.yaml",
        {
            "scaling.returned_item_count_multiplier": 3,
            "fleet.max_instances": 14,
            "logs.retention_days": 60,
            "worker.initial_lease_table_read_capacity": 150,
        },
    )
    threshold = prod("threshold")
    assert _templates(threshold) != _templates(before)
    assert _launch_template(threshold) == _launch_template(before)

    # What prod's workers read, or the processor prod runs: a new launch template (new instances).
    edit_yaml(config / "prod.yaml", {"worker.failover_time_millis": 20000})
    worker = prod("worker")
    assert _launch_template(worker) != _launch_template(threshold)
    audit = repository / "processors" / "audit_format.py"
    audit.write_text(audit.read_text() + "\n# an edit to code prod runs\n")
    processor = prod("processor")
    assert _launch_template(processor) != _launch_template(worker)

"""`consumer config validate` checks what `consumer run` would refuse (the processor imports, a
built-in's name, options that fit), each as one line naming the fix; `consumer new processor`
writes a processor, its test and an environment that validates; the local helpers need no AWS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ground.settings import load_settings
from tools.cli import main
from tools.commands import ExitCode
from tools.local_aws import configured_tables, is_local_endpoint, use_local_credentials

REPO_CONFIG = Path(__file__).resolve().parents[3] / "config"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory with a copy of config/, as the working directory."""
    shutil.copytree(REPO_CONFIG, tmp_path / "config")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def validate(env: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    code = main(["config", "validate", "--env", env, "--config-dir", "config"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


def write_env(project: Path, name: str, processing: str) -> None:
    text = (project / "config" / "local.yaml").read_text()
    start, end = text.index("processing:"), text.index("emulator:")
    (project / "config" / f"{name}.yaml").write_text(text[:start] + processing + text[end:])


def test_processor_that_does_not_import(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_env(project, "bad", "processing:\n  processor: myproc.counter:handle\n")
    code, _, err = validate("bad", capsys)
    assert code == ExitCode.CONFIG
    assert err[0].startswith("env bad from ")
    assert len(err) == 2 and err[1].startswith("error: ")
    assert f"no myproc/counter.py in {project.resolve()} (processing.import_paths)" in err[1]


def test_processor_in_the_project_directory_validates(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "myproc").mkdir()
    (project / "myproc" / "__init__.py").write_text("")
    (project / "myproc" / "counter_ok.py").write_text("def handle(batch):\n    return None\n")
    write_env(project, "good", "processing:\n  processor: myproc.counter_ok:handle\n")
    try:
        code, out, err = validate("good", capsys)
    finally:
        for name in [m for m in sys.modules if m == "myproc" or m.startswith("myproc.")]:
            del sys.modules[name]
    assert code == 0, err
    assert "processor myproc.counter_ok:handle" in out


def test_misspelt_built_in(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_env(project, "typo", "processing:\n  processor: changelogg\n")
    code, _, err = validate("typo", capsys)
    assert code == ExitCode.CONFIG and len(err) == 2
    assert "did you mean 'changelog'?" in err[1]


def test_options_that_do_not_fit_name_the_key(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_env(project, "opts", "processing:\n  processor: changelog\n  options: {destinaton: var/x}\n")
    code, _, err = validate("opts", capsys)
    assert code == ExitCode.CONFIG and len(err) == 2
    assert "processing.options for changelog: unknown destinaton (allowed: destination, format)" in err[1]


def test_scaffold_writes_files_that_validate_and_pass_their_test(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", "processor", "audit"]) == 0
    out = capsys.readouterr().out
    for path in ("processors/audit.py", "tests/test_audit.py", "config/audit.yaml"):
        assert (project / path).is_file() and path in out
    try:
        code, out, err = validate("audit", capsys)
    finally:
        for name in [m for m in sys.modules if m == "processors" or m.startswith("processors.")]:
            del sys.modules[name]
    assert code == 0, err
    assert "processor processors.audit:Processor" in out
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    test = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_audit.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert test.returncode == 0, test.stdout + test.stderr
    # A second scaffold of the same name overwrites nothing.
    before = (project / "processors" / "audit.py").read_text()
    assert main(["new", "processor", "audit"]) == ExitCode.USAGE
    assert "not overwriting" in capsys.readouterr().err
    assert (project / "processors" / "audit.py").read_text() == before


def test_scaffold_refuses_a_name_that_is_no_module(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "processor", "My-Proc"]) == ExitCode.USAGE
    assert "lower-case letters" in capsys.readouterr().err
    assert not (project / "processors").exists()


def test_local_endpoints_get_dummy_credentials_and_nothing_else_does() -> None:
    local = load_settings("local", REPO_CONFIG, environ={})
    prod = load_settings("prod", REPO_CONFIG, environ={})
    assert is_local_endpoint(local.endpoint_url) and not is_local_endpoint(prod.endpoint_url)
    empty: dict[str, str] = {}
    assert use_local_credentials(local, empty) and empty["AWS_ACCESS_KEY_ID"] == "local"
    chosen = {"AWS_PROFILE": "mine"}
    assert not use_local_credentials(local, chosen) and "AWS_ACCESS_KEY_ID" not in chosen
    nothing: dict[str, str] = {}
    assert not use_local_credentials(prod, nothing) and nothing == {}


def test_configured_tables_follow_the_processor() -> None:
    local = load_settings("local", REPO_CONFIG, environ={})
    (source,) = configured_tables(local)
    assert (source.name, source.partition_key.name, source.sort_key and source.sort_key.name) == (
        "orders",
        "pk",
        "sk",
    )
    assert source.create_arguments()["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    replica = load_settings(
        "local",
        REPO_CONFIG,
        environ={
            "CONSUMER_PROCESSING__PROCESSOR": "dynamodb_replica",
            "CONSUMER_PROCESSING__OPTIONS__TABLE": "copy",
        },
    )
    names = [(spec.name, spec.role) for spec in configured_tables(replica)]
    assert names == [("orders", "source table"), ("copy", "replica table")]
    assert "StreamSpecification" not in configured_tables(replica)[1].create_arguments()


def test_scaffolded_environments_do_not_share_an_emulator(project: Path) -> None:
    """Each scaffold gets a table, an emulator port and an application name (leases table) of its own,
    apart from config/local.yaml's and from each other's, so no `consumer run` attaches to another
    environment's emulator."""
    assert main(["new", "processor", "audit"]) == 0
    assert main(["new", "processor", "billing"]) == 0
    try:
        envs = {
            name: load_settings(name, project / "config", environ={})
            for name in ("local", "audit", "billing")
        }
    finally:
        for name in [m for m in sys.modules if m == "processors" or m.startswith("processors.")]:
            del sys.modules[name]
    for attribute in (
        lambda s: s.endpoint_url,
        lambda s: s.emulator.port,
        lambda s: s.table.name,
        lambda s: s.leases_table_name,
    ):
        values = [attribute(s) for s in envs.values()]
        assert len(set(values)) == 3, values
    audit = envs["audit"]
    assert audit.endpoint_url == f"http://127.0.0.1:{audit.emulator.port}"
    # A quiet shard polls at least once a second: records written arrive within it, not 10 s later.
    assert audit.worker.max_idle_time_between_reads_millis == 1000


def test_a_worker_has_processed_what_every_shard_holds() -> None:
    """`local write` waits for this: every shard with records checkpointed at or past its last one
    (a finished shard whose lease was cleaned up counts when a leased shard descends from it)."""
    from consumer.leases.model import ExtendedSequenceNumber, Lease
    from tools.local_aws import shards_behind

    def lease(shard: str, checkpoint: str) -> Lease:
        return Lease(shard, "w", 1, ExtendedSequenceNumber(checkpoint))

    shards = [
        {"shardId": "old", "parentShardId": None, "lastSequenceNumber": "100"},
        {"shardId": "a", "parentShardId": "old", "lastSequenceNumber": "250"},
        {"shardId": "b", "parentShardId": "old", "lastSequenceNumber": None},  # nothing written
        {"shardId": "c", "parentShardId": None, "lastSequenceNumber": "90"},
    ]
    assert shards_behind(shards, {}) == ["old", "a", "c"]  # no worker yet
    leases = {"a": lease("a", "250"), "c": lease("c", "80")}
    assert shards_behind(shards, leases) == ["c"]  # "old" was finished and cleaned up: "a" descends from it
    leases["c"] = lease("c", "SHARD_END")
    assert shards_behind(shards, leases) == []
    assert shards_behind(shards, {"a": lease("a", "TRIM_HORIZON"), "c": leases["c"]}) == ["a"]

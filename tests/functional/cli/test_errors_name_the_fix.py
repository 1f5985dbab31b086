"""Every kind of bad input a new user meets is one line on stderr that names the fix, and each kind
of error has one exit code, whichever command met it (tools.commands.ExitCode, listed by `consumer
--help` and the README).

The commands run in this process through ``tools.cli.main`` (argument parsing to exit code, as the
console script runs it); the emulator that is "down" is a loopback port nothing listens on, the
missing leases table a moto server on 127.0.0.1 without it.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ground.settings import WorkerSettings
from tests.support import free_port, moto_server
from tools.cli import main
from tools.commands import ExitCode

REPO = Path(__file__).resolve().parents[3]
LOCAL_ENV = (
    "application_name: app-{name}\nendpoint_url: http://127.0.0.1:{port}\nemulator: {{port: {port}}}\n"
)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory (the working directory) with the repository's config/base.yaml."""
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "base.yaml", tmp_path / "config" / "base.yaml")
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("CONSUMER_")]:
        monkeypatch.delenv(name)
    return tmp_path


def write_env(project: Path, name: str, port: int) -> None:
    (project / "config" / f"{name}.yaml").write_text(LOCAL_ENV.format(name=name, port=port))


def the_error(capsys: pytest.CaptureFixture[str]) -> str:
    """stderr's one error line (after the line naming the environment, when it was loaded)."""
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("env ")]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "Traceback" not in lines[0], lines
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["leases"],
        ["dashboard", "--out", "var/d.png"],
        ["local", "write"],
        ["run"],
        ["pipeline", "verify"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_emulator_down_names_local_up(
    project: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    port = free_port()  # nothing listens there
    write_env(project, "mine", port)
    assert main([*command, "--env", "mine"]) == ExitCode.UNAVAILABLE
    error = the_error(capsys)
    assert f"nothing answers at http://127.0.0.1:{port}" in error
    assert error.endswith("start the emulator: `consumer local up --env mine`")


def test_missing_leases_table_names_what_creates_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with moto_server() as endpoint:
        write_env(project, "fresh", int(endpoint.rsplit(":", 1)[1]))
        assert main(["leases", "--env", "fresh"]) == ExitCode.UNAVAILABLE
    error = the_error(capsys)
    assert f"leases table app-fresh-fresh does not exist at {endpoint}" in error
    assert "`consumer run --env fresh` creates it" in error and "`consumer local up --env fresh`" in error


def test_another_environments_emulator_is_not_attached_to(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`local up --env audit` left its emulator on a port env `local` names too: a command of env
    `local` says whose emulator that is instead of using its tables (and writing into its files)."""
    port = free_port()
    write_env(project, "local", port)
    (project / "var").mkdir()
    # An emulator recorded for env audit at that endpoint, alive (this process stands in for it).
    (project / "var" / "emulator-audit.json").write_text(
        f'{{"env": "audit", "pid": {os.getpid()}, "endpoint": "http://localhost:{port}"}}'
    )
    assert main(["run"]) == ExitCode.UNAVAILABLE
    error = the_error(capsys)
    assert "was started for env audit, not local" in error
    assert "`consumer local down --env audit`" in error and "config/local.yaml" in error


@pytest.mark.parametrize("command", [["config", "validate"], ["run"], ["plan"], ["leases"]])
def test_yaml_syntax_error_is_one_line_at_file_line_column(
    project: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    (project / "config" / "broken.yaml").write_text("worker:\n  max_records: 10\n  failover: [1,\n")
    assert main([*command, "--env", "broken"]) == ExitCode.CONFIG
    error = the_error(capsys)
    assert re.match(r"error: config/broken\.yaml:4:1: not valid YAML: expected the node content", error), (
        error
    )


@pytest.mark.parametrize("command", [["config", "validate"], ["run"]])
def test_unknown_key_is_one_short_line(
    project: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    (project / "config" / "typo.yaml").write_text("worker:\n  max_record: 10\n  zzz: 1\n")
    assert main([*command, "--env", "typo"]) == ExitCode.CONFIG
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert lines == [
        "error: config/typo.yaml:2:3: worker.max_record: unknown key; did you mean 'max_records'?",
        "error: config/typo.yaml:3:3: worker.zzz: unknown key (not one of the "
        f"{len(WorkerSettings.model_fields)} keys of worker: docs/settings.md lists them)",
    ]


def test_a_processor_that_does_not_import_is_the_same_kind_for_validate_and_run(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same mistake, the same exit code, whichever command finds it."""
    port = free_port()
    (project / "config" / "p.yaml").write_text(
        LOCAL_ENV.format(name="p", port=port) + "processing:\n  processor: nowhere.module:handle\n"
    )
    validate = main(["config", "validate", "--env", "p"])
    first = the_error(capsys)
    with moto_server() as endpoint:  # `run` checks the processor once something answers
        text = (project / "config" / "p.yaml").read_text().replace(f"127.0.0.1:{port}", endpoint[7:])
        (project / "config" / "p.yaml").write_text(text)
        run = main(["run", "--env", "p"])
    second = the_error(capsys)
    assert validate == run == ExitCode.CONFIG
    assert (
        "module nowhere.module does not import" in first and "module nowhere.module does not import" in second
    )


def test_exit_codes_are_listed_by_help_and_the_readme(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    help_text = capsys.readouterr().out
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert f"{code.value:>3}  {code.meaning}" in help_text
        assert f"| {code.value} | {code.meaning} |" in readme, f"README lacks exit code {code.value}"


def test_demo_on_a_taken_port_names_the_way_out(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as holder:  # another program on the demo's port
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        write_env(project, "local", holder.getsockname()[1])
        assert main(["demo", "--env", "local", "--workdir", "var/demo"]) == ExitCode.UNAVAILABLE
    error = the_error(capsys)
    assert "is taken by another program" in error
    assert re.search(r"CONSUMER_ENDPOINT_URL=http://127\.0\.0\.1:\d+ make demo$", error), error


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    """`consumer config schema | head`: the reader goes away; no BrokenPipeError traceback. (``head -n 0``
    leaves at once, before the schema is written, so the pipe is closed whatever the timing.)"""
    command = f"{sys.executable} -m tools.cli config schema | head -n 0"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == ExitCode.CLOSED_PIPE

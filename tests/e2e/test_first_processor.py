"""The README's "Your first processor" steps, run as written: the commands are read from README.md
(the fenced block between the ``first-processor`` markers), so this test fails when they drift.

The project is a fresh directory holding a copy of ``config/base.yaml`` (what a clone has), and the
commands get no environment variables beyond what the README shows: no AWS credentials, no
PYTHONPATH, no CONSUMER_* overrides. One change is made, and only to keep the test from colliding
with a developer's emulator: after the scaffold, the emulator port in the generated
``config/audit.yaml`` is swapped for a free one.

How each line is run: ``.venv/bin/consumer`` and ``.venv/bin/python`` are this interpreter; a line
ending in ``&`` starts in the background; ``kill %1`` sends SIGTERM to it and expects a clean exit.
Every other line runs as it is, right after the one before: ``cat`` straight after ``local write``
must print the records (``local write`` returns once a worker has processed them). Everything
started is stopped in ``finally``, whatever happened.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
START, END = "<!-- first-processor:start -->", "<!-- first-processor:end -->"
PORT_IN_CONFIG = re.compile(r"endpoint_url: http://127\.0\.0\.1:(\d+)")


def readme_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = text[text.index(START) + len(START) : text.index(END)]
    fenced = re.search(r"```sh\n(.*?)```", block, re.S)
    assert fenced, "the first-processor block holds no ```sh fence"
    return [line.strip() for line in fenced.group(1).splitlines() if line.strip()]


def clean_environment() -> dict[str, str]:
    """The caller's environment without anything that would make the README's commands work by
    accident (credentials, overrides, import paths); AWS configuration files point nowhere."""
    dropped = ("AWS_", "CONSUMER_", "PYTHONPATH", "BOTO_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    if words[0] == ".venv/bin/consumer":
        return [sys.executable, "-m", "tools.cli", *words[1:]]
    if words[0] == ".venv/bin/python":
        return [sys.executable, *words[1:]]
    return words


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def cleanup(project: Path, env: dict[str, str], background: list[subprocess.Popen[bytes]]) -> Iterator[None]:
    try:
        yield
    finally:
        for process in background:
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        states = sorted((project / "var").glob("emulator*.json"))
        if states:
            pids = [int(json.loads(state.read_text())["pid"]) for state in states]
            subprocess.run(
                argv(".venv/bin/consumer local down"), cwd=project, env=env, timeout=60, check=False
            )
            for pid in pids:
                with suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)


def test_the_readme_steps_work_as_written(tmp_path: Path) -> None:
    commands = readme_commands()
    assert any(c.startswith(".venv/bin/consumer new processor ") for c in commands)
    project = tmp_path / "project"
    (project / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "base.yaml", project / "config" / "base.yaml")
    env = clean_environment()
    background: list[subprocess.Popen[bytes]] = []
    written = 0
    delivered: list[dict[str, object]] = []
    with cleanup(project, env, background):
        for command in commands:
            words = shlex.split(command, comments=True)
            if command.endswith("&"):
                log = (tmp_path / f"background-{len(background)}.log").open("wb")
                background.append(
                    subprocess.Popen(
                        argv(command.rstrip("&").strip()),
                        cwd=project,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
                log.close()
                continue
            if words == ["kill", "%1"]:
                worker = background[0]
                worker.send_signal(signal.SIGTERM)
                assert worker.wait(timeout=60) == 0, (tmp_path / "background-0.log").read_text()
                continue
            result = subprocess.run(
                argv(command), check=False, cwd=project, env=env, capture_output=True, text=True, timeout=180
            )
            assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
            if "Traceback" in result.stderr:
                pytest.fail(f"{command} printed a traceback:\n{result.stderr}")
            if words[1:3] == ["new", "processor"]:
                config = project / "config" / f"{words[3]}.yaml"
                text = config.read_text()
                match = PORT_IN_CONFIG.search(text)
                assert match, text
                config.write_text(text.replace(match.group(1), str(free_port())))
            if words[1:3] == ["local", "write"]:
                written = int(words[words.index("--count") + 1])
            if words[0] == "cat":
                delivered = [json.loads(line) for line in result.stdout.splitlines()]
                assert len(delivered) == written, (tmp_path / "background-0.log").read_text()
    assert written > 0
    keys = sorted(str(record["keys"]["pk"]) for record in delivered)  # type: ignore[index]
    assert keys == sorted(f"item-{n}" for n in range(1, written + 1))
    assert all(record["event"] == "INSERT" for record in delivered)
    assert not list((project / "var").glob("emulator*.json"))  # `local down` ran and stopped it

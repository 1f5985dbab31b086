"""How the emulator process ends (emulator/server.py serve): SIGTERM and SIGINT stop it with exit 0;
a tick of its streams that raises stops it too, with a non-zero exit that says so, rather than
leaving it serving a stream whose time stands still and that no signal stops any more (its signal
handler only notes the signal; the ticker acts on it)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

START = """
import sys
from emulator import server
{patch}
sys.exit(server.main(["--env", "local", "--config-dir", "config", "--quiet", "--port", "0"]))
"""


def start(patch: str = "") -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", START.format(patch=patch)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("EMULATOR READY"), line + process.stderr.read() if process.stderr else line
    return process


def ended(process: subprocess.Popen[str], timeout: float = 20) -> tuple[int, str]:
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"the emulator was still running {timeout} s later")
    return process.returncode, stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_emulator_cleanly(signum: signal.Signals) -> None:
    process = start()
    process.send_signal(signum)
    code, stderr = ended(process)
    assert code == 0, stderr


def test_a_tick_that_raises_ends_the_emulator_with_an_error_saying_so() -> None:
    process = start(
        patch=(
            "from emulator.engine import StreamEngine\n"
            "def tick(self):\n"
            "    raise ZeroDivisionError('a broken tick')\n"
            "StreamEngine.tick = tick\n"
        )
    )
    code, stderr = ended(process)
    assert code != 0
    assert "the emulator stopped: a tick of its streams failed" in stderr, stderr
    assert "ZeroDivisionError: a broken tick" in stderr, stderr

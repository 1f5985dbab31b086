"""Running the project's CDK CLI as a user would, offline and without credentials.

Every AWS call the CLI makes goes to a closed port on this host and no credentials are found
anywhere (no files, no instance metadata), so a command that needs AWS stops at the CLI's own
"no credentials" message: the point where a user's credentials would take over. A confirmation
prompt (``cdk destroy``) needs a terminal: :func:`run` gives the command one and answers it.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.infra.conftest import REPO

CDK = REPO / "node_modules" / ".bin" / "cdk"
# What the CDK CLI says when a command reaches the point where it needs an account's credentials.
NO_CREDENTIALS = "but no credentials have been configured"


def offline_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONSUMER_", "CDK_"))}
    environ.update(
        {
            "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
            "CDK_DISABLE_VERSION_CHECK": "1",
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            # Any AWS call would go to a closed port on this host and fail at once.
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
    )
    environ.update(extra or {})
    return environ


def run(
    argv: Sequence[str],
    cwd: Path,
    environ: Mapping[str, str],
    answer: str | None = None,
    timeout: float = 300,
) -> tuple[int, str]:
    """(exit status, stdout and stderr) of ``argv``; with ``answer``, on a terminal that types it."""
    if answer is None:
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(environ),
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            start_new_session=True,
        )
    finally:
        os.close(secondary)
    output = b""
    answered = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # the terminal closed: the command has exited
                    break
                if not chunk:
                    break
                output += chunk
                if not answered and b"(y/n)" in output:
                    os.write(primary, answer.encode() + b"\n")
                    answered = True
            elif process.poll() is not None:
                break
        status = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)
    return status, output.decode(errors="replace")

"""Instance boot, as code: unpack the asset, build the virtualenv from the wheelhouse, write the agent
configuration and the units, start them, and tell CloudFormation whether the workers came up.

Run by the user data with the instance's ``python3.11`` straight from the downloaded asset
(``PYTHONPATH=asset.zip python3.11 -m deploy.bootstrap ...``): standard library only. Every path is
under ``--root`` (``/`` on an instance), so a test runs this same code under a temporary directory
with its own :class:`deploy.host.Host` in place of systemd and the AWS CLI.

The CloudFormation signal is what makes a half-working boot visible: the group's creation policy
(also that of a replacement group, at a deploy) waits for one SUCCESS per new instance, sent only
once every worker process has completed a lease-taking round (its heartbeat, see
:mod:`deploy.health`). Anything else (a failed
install, workers that never report) sends FAILURE, and the deployment rolls back instead of
leaving an instance InService that processes nothing. After boot the watchdog unit takes over.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

from deploy.health import wait_for_healthy
from deploy.host import SERVICE_USER, Host, SystemdHost
from deploy.plan import WATCHDOG_UNIT, BootPlan, Layout
from deploy.units import unit_files

INSTALL_FILE = "install.txt"
BOOTED = 0
# Exit statuses that tell the user data "FAILURE was signalled already". Outside a deploy nobody
# hears that signal, so something must also end an instance that cannot work:
# * SIGNALLED_FAILURE: a step before the watchdog runs failed (unpack, virtualenv, configuration,
#   user, agent, systemctl): nothing on the instance will ever judge it, so the user data marks it
#   Unhealthy and the group replaces it;
# * SIGNALLED_WATCHDOG_JUDGES: everything started but the workers did not all report a good round
#   within the health timeout: the watchdog runs by then and judges the instance from there on, by
#   rules that tell its own failure (crash loop, stalled or failing workers while others are fine)
#   from the fleet's (a DynamoDB outage, when replacing instances helps nothing).
# Any other failure status (a traceback's 1 before boot() ran) makes the user data signal FAILURE
# and mark the instance Unhealthy itself.
SIGNALLED_FAILURE = 3
SIGNALLED_WATCHDOG_JUDGES = 4


def unpack(archive: Path, layout: Layout) -> None:
    """The asset into the units' working directory (replacing an earlier copy)."""
    if layout.source_dir.exists():
        shutil.rmtree(layout.source_dir)
    layout.source_dir.mkdir(parents=True)
    with zipfile.ZipFile(archive) as source:
        source.extractall(layout.source_dir)


def offline_pip_environment() -> dict[str, str]:
    """The environment without any pip configuration: no index, no extra find-links, only the
    command line's wheelhouse."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def install_command(layout: Layout) -> list[str]:
    """Every wheel from the asset's wheelhouse, each checked against the lock's hashes."""
    return [
        str(layout.venv_dir / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--no-index",
        "--find-links",
        str(layout.wheelhouse),
        "--require-hashes",
        "--only-binary=:all:",
        "--no-cache-dir",
        "-r",
        str(layout.wheelhouse / INSTALL_FILE),
    ]


def build_venv(layout: Layout, python: str) -> None:
    _run([python, "-m", "venv", "--clear", str(layout.venv_dir)])
    _run(install_command(layout), env=offline_pip_environment())


def write_configuration(plan: BootPlan, layout: Layout) -> None:
    """The plan (the watchdog reads it), the agent's configuration and the unit files."""
    layout.install_root.mkdir(parents=True, exist_ok=True)
    layout.health_dir.mkdir(parents=True, exist_ok=True)
    layout.plan_file.write_text(plan.to_json())
    layout.agent_config_file.parent.mkdir(parents=True, exist_ok=True)
    layout.agent_config_file.write_text(json.dumps(plan.agent_config, indent=2, sort_keys=True))
    layout.unit_dir.mkdir(parents=True, exist_ok=True)
    for name, content in unit_files(plan, layout).items():
        (layout.unit_dir / name).write_text(content)


def _run(command: Sequence[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(list(command), check=True, env=env, timeout=900)


def _signal(host: Host, plan: BootPlan, status: str, reason: str) -> None:
    """A signal outside a stack operation (a scale-out) is refused by CloudFormation; that must not
    stop the boot, whose outcome the watchdog then judges."""
    try:
        host.signal(plan, status, reason)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"signal {status} not delivered: {exc}", file=sys.stderr, flush=True)


def boot(plan: BootPlan, layout: Layout, archive: Path, host: Host, python: str = sys.executable) -> bool:
    """The whole boot; True when every worker reported healthy (SUCCESS was signalled)."""
    return run_boot(plan, layout, archive, host, python) == BOOTED


def run_boot(plan: BootPlan, layout: Layout, archive: Path, host: Host, python: str = sys.executable) -> int:
    """The whole boot; its exit status: :data:`BOOTED` (SUCCESS signalled), or which FAILURE."""
    started = time.time()
    try:
        unpack(archive, layout)
        build_venv(layout, python)
        write_configuration(plan, layout)
        host.ensure_user(SERVICE_USER, layout.install_root)
        host.chown(layout.install_root, SERVICE_USER)
        host.start_agent(layout.agent_config_file)
        host.enable_and_start([*plan.unit_names(), WATCHDOG_UNIT])
    except Exception as exc:  # whatever broke, CloudFormation hears of it now, not at its timeout
        _signal(host, plan, "FAILURE", f"boot failed: {type(exc).__name__}: {exc}")
        return SIGNALLED_FAILURE
    if wait_for_healthy(plan, layout, started):
        _signal(host, plan, "SUCCESS", f"{plan.worker_processes} worker(s) healthy")
        return BOOTED
    _signal(
        host,
        plan,
        "FAILURE",
        f"workers not healthy within {plan.health_timeout_seconds} s (no lease-taking round reported)",
    )
    return SIGNALLED_WATCHDOG_JUDGES


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3.11 -m deploy.bootstrap", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--archive", type=Path, required=True, help="the downloaded CDK asset (zip)")
    parser.add_argument("--plan", type=Path, required=True, help="the boot plan JSON from the user data")
    parser.add_argument("--root", type=Path, default=Path("/"), help="root prefix of every path")
    parser.add_argument(
        "--group-name",
        default=None,
        help="the instance's Auto Scaling group (CloudFormation names it: the user data asks Auto Scaling)",
    )
    args = parser.parse_args(argv)
    plan = BootPlan.from_json(args.plan.read_text())
    if args.group_name:
        plan = dataclasses.replace(plan, group_name=args.group_name)
    return run_boot(plan, Layout(args.root), args.archive, SystemdHost())


if __name__ == "__main__":
    sys.exit(main())

"""Sub-commands of ``consumer``; each module exposes ``register(subparsers)``.

Also what every sub-command shares: the exit codes (defined here once; ``consumer --help`` and the
README list them from :class:`ExitCode`), the one error a command raises for a mistake the user can
fix (:class:`CommandError`), ``--env`` and the line that says which configuration was loaded.
"""

from __future__ import annotations

import argparse
import sys
from enum import IntEnum
from typing import Any

from ground.settings import Settings, load_settings, loaded_sources
from tools.local_aws import (
    another_environments_emulator,
    endpoint_answers,
    is_local_endpoint,
    use_local_credentials,
)

DEFAULT_ENV = "local"


class ExitCode(IntEnum):
    """One exit code per kind of error, the same for every sub-command.

    Each member's text is what ``consumer --help`` and the README say about it.
    """

    OK = 0
    FAILED = 1
    USAGE = 2
    CONFIG = 3
    UNAVAILABLE = 4
    INTERRUPTED = 130
    CLOSED_PIPE = 141

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.OK: "done",
    ExitCode.FAILED: "it ran and failed: verify found differences, the demo's verdict, a worker stopped "
    "by an error it cannot get past",
    ExitCode.USAGE: "the command line: an unknown option, or an argument the command refuses (a name "
    "that is no module, an export older than the stream's 24 h)",
    ExitCode.CONFIG: "config/<env>.yaml: YAML syntax, an unknown key, a value out of range, or the "
    "processor it names does not import or take its options",
    ExitCode.UNAVAILABLE: "what the environment names is missing, does not answer or is not as configured: "
    "the emulator, the source table or its stream, the leases table, AWS",
    ExitCode.INTERRUPTED: "Ctrl-C",
    ExitCode.CLOSED_PIPE: "what read its output stopped reading (`consumer config schema` piped into `head`): "
    "no traceback, the code a shell gives any command cut off that way",
}


def exit_codes_text() -> str:
    """The exit codes as ``consumer --help`` prints them (one line each)."""
    return "\n".join(f"  {code.value:>3}  {code.meaning}" for code in ExitCode)


class CommandError(Exception):
    """A failure the user can fix; printed as one line, without a traceback, with its exit code.

    Defined here rather than in :mod:`tools.cli` so that it is one class also under
    ``python -m tools.cli`` (where the running module is ``__main__``, a second copy of cli).
    """

    def __init__(self, message: str, exit_code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """``--env`` and ``--config-dir``, shared by every command that reads settings."""
    parser.add_argument(
        "--env", default=None, help=f"environment: config/<env>.yaml (default: {DEFAULT_ENV}, and it says so)"
    )
    parser.add_argument(
        "--config-dir",
        default=None,
        help="configuration directory (default: $CONSUMER_CONFIG_DIR or ./config)",
    )


def resolve_env(args: Any) -> str:
    """The environment named by ``--env``, or the default; remembers whether it was chosen."""
    if getattr(args, "env", None) is None:
        args.env = DEFAULT_ENV
        args.env_defaulted = True
    return str(args.env)


def settings_from(args: Any) -> Settings:
    """Load the environment's settings and say first, on stderr, which environment and files.

    Every command that reads settings starts with one line naming the environment, whether it was
    the default (``local``, which nobody should get without being told), and the files and variables
    it came from (stderr, so ``--json`` output stays clean).
    """
    env = resolve_env(args)
    settings = load_settings(env, args.config_dir)
    sources = ", ".join(loaded_sources(env, args.config_dir))
    chosen = " (the default: pass --env to choose)" if getattr(args, "env_defaulted", False) else ""
    dummy = use_local_credentials(settings)
    note = "; dummy AWS credentials for the local endpoint" if dummy else ""
    print(f"env {env}{chosen} from {sources}{note}", file=sys.stderr)
    return settings


def require_local_endpoint_up(settings: Settings) -> None:
    """With a local endpoint that nobody answers on, say how to start the emulator, and stop.

    Every command that talks to the environment's endpoint calls this first, so that an emulator
    that is not running is one line naming ``consumer local up`` (not botocore's "Could not connect
    to the endpoint URL" after its retries).
    """
    endpoint = settings.endpoint_url
    if endpoint is None or not is_local_endpoint(endpoint):
        return
    other = another_environments_emulator(settings)
    if other is not None:
        raise CommandError(
            f"the emulator at {endpoint} was started for env {other.env}, not {settings.env}: stop it "
            f"(`consumer local down --env {other.env}`) or give env {settings.env} a port of its own "
            f"(endpoint_url and emulator.port in config/{settings.env}.yaml)",
            ExitCode.UNAVAILABLE,
        )
    if not endpoint_answers(endpoint):
        raise CommandError(
            f"nothing answers at {endpoint} (endpoint_url of env {settings.env}): "
            f"start the emulator: `consumer local up --env {settings.env}`",
            ExitCode.UNAVAILABLE,
        )


def add_command(subparsers: Any, name: str, summary: str, description: str | None = None) -> Any:
    """A sub-command with its one-line ``summary`` (listed by the parent's ``--help``) and its
    ``description`` (the first paragraph of its own ``--help``; the summary when not given), so that
    no command's help starts with nothing but its usage line."""
    text = description or f"{summary[0].upper()}{summary[1:]}."
    return subparsers.add_parser(name, help=summary, description=text)

"""Sub-commands of ``consumer``; each module exposes ``register(subparsers)``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ground.settings import Settings, load_settings, loaded_sources
from tools.local_aws import use_local_credentials

DEFAULT_ENV = "local"


class CommandError(Exception):
    """A failure the user can fix; printed as one line, without a traceback.

    Defined here rather than in :mod:`tools.cli` so that it is one class also under
    ``python -m tools.cli`` (where the running module is ``__main__``, a second copy of cli).
    """


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

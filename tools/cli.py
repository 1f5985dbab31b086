"""The ``consumer`` command.

Each sub-command lives in its own module under ``tools/commands/`` and exposes
``register(subparsers)``; this module only assembles them and turns known errors into a one-line
message and a non-zero exit (never a traceback for bad input).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from consumer.leases.errors import LeaseError
from ground.settings import ConfigError
from tools.commands import CommandError

# Modules that contribute sub-commands, in the order `consumer --help` lists them.
COMMAND_MODULES = (
    "tools.commands.config",
    "tools.commands.plan",
    "tools.commands.dashboard",
    "tools.commands.leases",
    "tools.commands.pipeline",
    "tools.commands.run",
    "tools.commands.demo",
    "tools.commands.local",
    "tools.commands.new",
)

EXIT_USAGE = 2

__all__ = ["CommandError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="consumer",
        description=(
            "Process a DynamoDB table's stream with a self-hosted fleet of Python workers that share "
            "the stream's shards through a leases table. Settings come from config/<env>.yaml."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except ConfigError as exc:
        print("configuration error:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    except (CommandError, LeaseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())

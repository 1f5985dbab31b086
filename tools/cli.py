"""The ``consumer`` command.

Each sub-command lives in its own module under ``tools/commands/`` and exposes
``register(subparsers)``; this module only assembles them and turns known errors into one line on
stderr and the exit code of their kind (:class:`~tools.commands.ExitCode`, defined once and listed
by ``consumer --help``): never a traceback for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterator, Sequence

from ground.settings import ConfigError
from tools.commands import CommandError, ExitCode, exit_codes_text

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

__all__ = ["CommandError", "ExitCode", "build_parser", "main", "version_text"]


def version_text() -> str:
    """``consumer --version``: the installed distribution's version (what pip and bug reports name)."""
    from importlib.metadata import PackageNotFoundError, version

    import consumer

    try:
        installed = version("dynamodb-stream-fleet")
    except PackageNotFoundError:  # run from a source tree that was never installed
        installed = consumer.__version__
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"consumer {installed} (dynamodb-stream-fleet, Python {python})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="consumer",
        description=(
            "Process a DynamoDB table's stream with a self-hosted fleet of Python workers that share "
            "the stream's shards through a leases table. Settings come from config/<env>.yaml."
        ),
        epilog=f"exit codes (the same for every command):\n{exit_codes_text()}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def subcommands(
    parser: argparse.ArgumentParser, path: str = "consumer"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (sub-)command's parser under ``parser``, with its full name (``consumer local up``)."""
    for action in parser._actions:  # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield f"{path} {name}", child
                yield from subcommands(child, f"{path} {name}")


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    # Here, not at the top, so that importing this module loads no lease store and no botocore;
    # build_parser() has loaded them by now anyway (the leases command reads the tables).
    from consumer.api.leases import LeaseError, LeaseStoreUnavailableError, LeaseTableMissingError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except ConfigError as exc:
        for problem in exc.problems:
            _error(str(problem))
        return ExitCode.CONFIG
    except CommandError as exc:
        _error(str(exc))
        return exc.exit_code
    except (LeaseTableMissingError, LeaseStoreUnavailableError) as exc:
        _error(str(exc))
        return ExitCode.UNAVAILABLE
    except LeaseError as exc:
        _error(str(exc))
        return ExitCode.FAILED
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return _closed_pipe()
    try:
        sys.stdout.flush()  # a closed pipe shows here when the last lines sat in the buffer
    except BrokenPipeError:
        return _closed_pipe()
    return code


def _closed_pipe() -> int:
    """The reader of stdout went away (``| head``): say nothing more. stdout points at /dev/null so
    that the interpreter's own flush at exit does not print a second traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return ExitCode.CLOSED_PIPE


if __name__ == "__main__":
    sys.exit(main())

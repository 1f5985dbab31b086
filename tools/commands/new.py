"""``consumer new processor NAME``: the shortest honest path to a processor of one's own."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tools.commands import CommandError, ExitCode, add_command


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "new",
        "write the files of a new processor (module, test, environment)",
        "Write the first files of something of your own in this project; `consumer new processor "
        "NAME` writes a processor, its test and a local environment that runs it.",
    )
    kinds = parser.add_subparsers(dest="new_kind", metavar="KIND", required=True)
    processor = add_command(
        kinds,
        "processor",
        "processors/NAME.py, tests/test_NAME.py and config/NAME.yaml (the local emulator) in this project",
        "Write processors/NAME.py (a processor whose handle(batch) appends one JSON line per record to "
        "var/NAME.jsonl), tests/test_NAME.py (its test, no AWS) and config/NAME.yaml (an environment "
        "on the local emulator, with a table and a port of its own). Existing files are never "
        "overwritten.",
    )
    processor.add_argument("name", help="module and environment name, e.g. audit")
    processor.add_argument("--dir", default=".", help="the project directory (default: the current one)")
    processor.add_argument(
        "--lambda",
        dest="lambda_form",
        action="store_true",
        help="an AWS Lambda handler(event, context) for DynamoDB Streams events instead of a class",
    )
    processor.set_defaults(handler=_processor)


def consumer_command(project: Path) -> tuple[str, str | None]:
    """How the hints spell the command: the project's ``.venv/bin/consumer`` when there is one (a
    bare ``consumer`` is on PATH only in an activated virtualenv), else ``consumer`` and how to get it."""
    if (project / ".venv" / "bin" / "consumer").exists():
        prefix = "" if project.resolve() == Path.cwd().resolve() else f"{project}/"
        return f"{prefix}.venv/bin/consumer", None
    return "consumer", "(`consumer` is the virtualenv's: activate it first, `source .venv/bin/activate`)"


def _processor(args: argparse.Namespace) -> int:
    from tools.scaffold import ScaffoldError, write_scaffold

    project = Path(args.dir)
    try:
        files = write_scaffold(args.name, project, lambda_form=args.lambda_form)
    except ScaffoldError as exc:
        raise CommandError(str(exc), ExitCode.USAGE) from None
    for file in files:
        print(f"wrote {file.path}: {file.what}")
    name = args.name
    consumer, activate = consumer_command(project)
    python = consumer.replace("/consumer", "/python") if consumer.endswith(".venv/bin/consumer") else "python"
    steps = [
        (f"{python} -m pytest -q tests/test_{name}.py", "the processor's own test"),
        (f"{consumer} local up --env {name}", "the emulator of env " + name + " and its table"),
        (f"{consumer} run --env {name} &", "a worker (in a second terminal: without the &)"),
        (f"{consumer} local write --env {name} --count 5", "5 items; returns once the worker has them"),
        (f"cat var/{name}.jsonl", "the records, as your processor wrote them"),
        (f"kill %1; {consumer} local down --env {name}", "stop the worker and the emulator"),
    ]
    width = max(len(command) for command, _ in steps)
    print("next:" + (f" {activate}" if activate else ""))
    for command, what in steps:
        print(f"  {command:<{width}}   # {what}")
    return ExitCode.OK

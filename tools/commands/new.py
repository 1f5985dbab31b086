"""``consumer new processor NAME``: the shortest honest path to a processor of one's own."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "new", help="write the files of a new processor (module, test, environment)"
    )
    kinds = parser.add_subparsers(dest="new_kind", metavar="KIND", required=True)
    processor = kinds.add_parser(
        "processor",
        help="processors/NAME.py, tests/test_NAME.py and config/NAME.yaml (the local emulator) in this project",
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


def _processor(args: argparse.Namespace) -> int:
    from tools.commands import CommandError
    from tools.scaffold import ScaffoldError, write_scaffold

    try:
        files = write_scaffold(args.name, Path(args.dir), lambda_form=args.lambda_form)
    except ScaffoldError as exc:
        raise CommandError(str(exc)) from None
    for file in files:
        print(f"wrote {file.path}: {file.what}")
    name = args.name
    print("next:")
    print(f"  .venv/bin/python -m pytest -q tests/test_{name}.py   # the processor's own test")
    print(f"  consumer local up --env {name}                       # the emulator and the table")
    print(f"  consumer run --env {name}                            # a worker (Ctrl-C stops it)")
    print(f"  consumer local write --env {name} --count 5          # in another terminal")
    print(f"  cat var/{name}.jsonl                                 # the records, as they arrived")
    return 0

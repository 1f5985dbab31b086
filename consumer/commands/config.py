"""``consumer config validate|schema``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from consumer.commands import add_env_arguments, settings_from
from consumer.settings import json_schema


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="check or describe config/<env>.yaml")
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)

    validate = actions.add_parser("validate", help="load an environment's settings and report problems")
    add_env_arguments(validate)
    validate.add_argument("--show", action="store_true", help="print the effective settings as JSON")
    validate.set_defaults(handler=_validate)

    schema = actions.add_parser("schema", help="print the JSON schema of config/*.yaml (editor completion)")
    schema.set_defaults(handler=_schema)


def _validate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    for warning in settings.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    if args.show:
        print(json.dumps(settings.model_dump(mode="json"), indent=2))
    else:
        what = f"application {settings.application_name}, table {settings.table.name}"
        print(f"config/{args.env}.yaml is valid ({what})")
    return 0


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2))
    return 0

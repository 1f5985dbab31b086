"""``consumer config validate|schema``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ground.settings import Settings, config_dir, json_schema
from tools.commands import add_env_arguments, settings_from


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
    from consumer.processing.errors import ProcessingConfigError
    from tools.commands import CommandError

    settings = settings_from(args)
    try:
        _check_processing(settings)
    except ProcessingConfigError as exc:
        raise CommandError(str(exc)) from None
    for warning in settings.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    if args.show:
        print(json.dumps(settings.model_dump(mode="json"), indent=2))
    else:
        what = (
            f"application {settings.application_name}, table {settings.table.name}, "
            f"processor {settings.processing.processor}"
        )
        print(f"{config_dir(args.config_dir) / f'{args.env}.yaml'} is valid ({what})")
    return 0


def _check_processing(settings: Settings) -> None:
    """Everything ``consumer run`` checks about ``processing.*`` before its first lease: the
    built-in's name and options, or that the user's processor imports and accepts its options.

    The clients are created (which needs no network) but never called.
    """
    from consumer.runtime.clients import AwsClients
    from consumer.runtime.processors import build_processor_factory

    build_processor_factory(settings, clients=AwsClients.from_settings(settings).processing())


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2))
    return 0

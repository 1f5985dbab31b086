"""``consumer config validate|schema``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ground.settings import Settings, config_dir, json_schema
from tools.commands import CommandError, ExitCode, add_command, add_env_arguments, settings_from


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "config",
        "check or describe config/<env>.yaml",
        "Check an environment's configuration without starting anything, or print the JSON schema "
        "every config/*.yaml follows.",
    )
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)

    validate = add_command(
        actions,
        "validate",
        "load an environment's settings and report problems",
        "Load config/base.yaml + config/<env>.yaml (+ CONSUMER_* variables) and check what `consumer "
        "run` checks before its first lease: every key and value, and that the processor imports and "
        "takes its options. Each problem is one line naming the file, the key and the fix.",
    )
    add_env_arguments(validate)
    validate.add_argument(
        "--show",
        action="store_true",
        help="print the effective settings as JSON, derived values (names, intervals, N) filled in",
    )
    validate.set_defaults(handler=_validate)

    schema = add_command(actions, "schema", "print the JSON schema of config/*.yaml (editor completion)")
    schema.set_defaults(handler=_schema)


def effective_settings(settings: Settings) -> dict[str, Any]:
    """The settings as JSON, with every key left empty whose value the product derives filled in
    with that value (a null there would read as "none" when it means "the default name")."""
    effective: dict[str, Any] = settings.model_dump(mode="json")
    for path, value in settings.derived().items():
        *parents, key = path.split(".")
        section = effective
        for parent in parents:
            section = section[parent]
        section[key] = value
    return effective


def _validate(args: argparse.Namespace) -> int:
    from consumer.processing import ProcessingConfigError

    settings = settings_from(args)
    try:
        _check_processing(settings)
    except ProcessingConfigError as exc:
        raise CommandError(str(exc), ExitCode.CONFIG) from None
    for warning in settings.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    if args.show:
        derived = ", ".join(settings.derived())
        print(f"derived (not set in the files, filled in below): {derived}", file=sys.stderr)
        print(json.dumps(effective_settings(settings), indent=2))
    else:
        what = f"application {settings.application_name}, " + "; ".join(
            f"table {view.table.name}, processor {view.processing.processor}"
            for view in settings.per_stream()
        )
        print(f"{config_dir(args.config_dir) / f'{args.env}.yaml'} is valid ({what})")
    return 0


def _check_processing(settings: Settings) -> None:
    """Everything ``consumer run`` checks about ``processing.*`` before its first lease: the
    built-in's name and options, or that the user's processor imports and accepts its options.

    The clients are created (which needs no network) but never called.
    """
    from consumer.api.aws import AwsClients
    from consumer.api.worker import build_processor_factory
    from consumer.processing import ProcessingConfigError

    for index, view in enumerate(settings.per_stream()):  # each stream's, naming its entry
        try:
            build_processor_factory(view, clients=AwsClients.from_settings(view).processing())
        except ProcessingConfigError as exc:
            if not settings.several_streams:
                raise
            raise ProcessingConfigError(f"streams.{index}: {exc}") from exc


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2))
    return 0

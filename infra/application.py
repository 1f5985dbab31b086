"""Build the CDK app for one environment from ``config/<env>.yaml`` (what ``app.py`` runs)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import App

from ground.settings import ConfigError, Settings, load_settings
from infra.asset import asset_exclude
from infra.errors import InfraConfigError
from infra.per_account import require_per_account_values
from infra.pipeline_resources import require_own_bucket_names
from infra.stack import ConsumerStack, StatefulStack, data_stack_name, stack_name

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
__all__ = [
    "BUNDLING_STACKS_CONTEXT",
    "REPOSITORY_ROOT",
    "EnvironmentNotChosenError",
    "build_app",
    "chosen_environment",
    "load_environment",
]


class EnvironmentNotChosenError(InfraConfigError):
    """``cdk deploy`` / ``cdk synth`` without ``-c env=<name>``."""


# The context the CDK CLI gives the app: the stacks to bundle assets for, ``[]`` for the commands
# that build nothing (bootstrap, destroy, list, ...).
BUNDLING_STACKS_CONTEXT = "aws:cdk:bundling-stacks"


def chosen_environment(app: App) -> str:
    """The ``-c env=...`` of this CDK invocation; refused when there is none, so that a plain
    ``cdk deploy`` never deploys some default environment (local's workers point at 127.0.0.1).

    The refusal speaks of the command at hand: a command that builds nothing (the CLI asks the app
    to bundle no stack: bootstrap, destroy, list) hears how to bootstrap or destroy an environment,
    not how to deploy one. (An app without stacks is no way out: the CDK CLI refuses even
    ``cdk bootstrap aws://ACCOUNT/REGION`` for an app that has none.)
    """
    env = app.node.try_get_context("env")
    if env:
        return str(env)
    if app.node.try_get_context(BUNDLING_STACKS_CONTEXT) == []:
        raise EnvironmentNotChosenError(
            "no environment chosen: add -c env=<name> (config/<name>.yaml), e.g. `cdk bootstrap -c env=prod` "
            "bootstraps the account and region prod is pinned to, `cdk destroy -c env=dev --all` removes dev"
        )
    raise EnvironmentNotChosenError(
        "no environment chosen: run `cdk deploy -c env=<name> --all` (or `cdk synth -c env=<name>`) "
        "where config/<name>.yaml describes it, e.g. -c env=dev or -c env=prod"
    )


def load_environment(env: str, config_dir: str | Path | None = None) -> Settings:
    try:
        return load_settings(env, config_dir)
    except ConfigError as exc:
        raise InfraConfigError(f"cannot synthesize env {env!r}:\n{exc}") from exc


def refuse_kinesis_stream_entries(settings: Settings) -> None:
    """A ``streams:`` entry with its own Kinesis ``source:`` is served by ``consumer run``, but the
    stacks would take it for one more table's stream: grant, watch and alarm on the top-level table
    in its place. Refused, naming the entry, rather than deployed with the wrong grants."""
    entries = [
        f"streams[{index}] ({stream.source.kinesis_stream_name})"
        for index, stream in enumerate(settings.streams or ())
        if stream.source.is_kinesis
    ]
    if entries:
        raise InfraConfigError(
            f"env {settings.env}: {', '.join(entries)}: source.kind: kinesis in a streams: entry is read by "
            "`consumer run` but not deployed by the CDK stacks, which deploy the Kinesis stream of the "
            "top-level source: only; give that stream an environment of its own with a top-level source:"
        )


def build_app(
    env: str,
    *,
    config_dir: str | Path | None = None,
    outdir: str | Path | None = None,
    source_path: str | Path = REPOSITORY_ROOT,
    app: App | None = None,
) -> tuple[App, ConsumerStack]:
    """The app and the stateless stack for ``env`` (its ``data`` is the stateful one); synth needs no
    credentials and makes no look-ups.

    Given the CDK CLI's ``app`` (``app.py``), the environment must have been chosen on the command
    line (``-c env=...``): ``env`` is then only what ``app.py`` fell back to.
    """
    if app is not None:
        env = chosen_environment(app)
    settings = load_environment(env, config_dir)
    require_per_account_values(settings)
    require_own_bucket_names(settings)
    refuse_kinesis_stream_entries(settings)
    app = app or App(outdir=str(outdir) if outdir is not None else None)
    data = StatefulStack(app, data_stack_name(settings), settings=settings)
    stack = ConsumerStack(
        app,
        stack_name(settings),
        settings=settings,
        data=data,
        source_path=str(source_path),
        asset_exclude=asset_exclude(),
    )
    return app, stack

"""Build the CDK app for one environment from ``config/<env>.yaml`` (what ``app.py`` runs)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import App

from ground.settings import ConfigError, Settings, load_settings
from infra.asset import ASSET_INCLUDE, ASSET_NEVER, asset_exclude
from infra.errors import InfraConfigError
from infra.stack import DISPOSABLE_ENVIRONMENTS, ConsumerStack, StatefulStack, data_stack_name, stack_name

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
# The asset's allow-list lives in infra/asset.py (re-exported here, where it used to be).
__all__ = [
    "ASSET_INCLUDE",
    "ASSET_NEVER",
    "REPOSITORY_ROOT",
    "asset_exclude",
    "build_app",
    "load_environment",
]


class EnvironmentNotChosenError(InfraConfigError):
    """``cdk deploy`` / ``cdk synth`` without ``-c env=<name>``."""


def chosen_environment(app: App) -> str:
    """The ``-c env=...`` of this CDK invocation; refused when there is none, so that a plain
    ``cdk deploy`` never deploys some default environment (local's workers point at 127.0.0.1)."""
    env = app.node.try_get_context("env")
    if not env:
        raise EnvironmentNotChosenError(
            "no environment chosen: run `cdk deploy -c env=<name> --all` (or `cdk synth -c env=<name>`) "
            "where config/<name>.yaml describes it, e.g. -c env=dev or -c env=prod"
        )
    return str(env)


def require_deployable(settings: Settings) -> None:
    """An environment deployed to AWS pins its account, so credentials of another account fail."""
    if settings.endpoint_url is None and settings.account is None:
        raise InfraConfigError(
            f"env {settings.env}: set `account:` (the 12-digit AWS account it deploys to) in "
            f"config/{settings.env}.yaml, or CONSUMER_ACCOUNT for one command; the region is "
            f"{settings.region} (`region:`)"
        )


AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"


def require_pinned_ami(settings: Settings) -> None:
    """An environment deployed to AWS names its AMI, so a deploy never picks up a new image."""
    if settings.endpoint_url is None and settings.fleet.ami_id is None:
        raise InfraConfigError(
            f"env {settings.env}: set fleet.ami_id (the AMI this release runs in {settings.region}) in "
            f"config/{settings.env}.yaml, e.g. the current Amazon Linux 2023: aws ssm get-parameter "
            f"--region {settings.region} --name {AMI_PARAMETER} --query Parameter.Value --output text"
        )


class AlarmTopicRequiredError(InfraConfigError):
    """An environment whose alarms must page (``scaling.require_alarm_topic``) names no topic."""


def require_alarm_topic(settings: Settings) -> None:
    """Where alarms must page someone (``scaling.require_alarm_topic``, and every environment but
    local and dev), a topic is set: an existing one by ARN, or a new one with an e-mail."""
    scaling = settings.scaling
    required = scaling.require_alarm_topic or settings.env not in DISPOSABLE_ENVIRONMENTS
    if required and not scaling.has_alarm_topic:
        raise AlarmTopicRequiredError(
            f"env {settings.env}: its alarms must notify someone (scaling.require_alarm_topic): set "
            f"scaling.alarm_topic_arn (an existing SNS topic) or scaling.alarm_topic_email in "
            f"config/{settings.env}.yaml, or CONSUMER_SCALING__ALARM_TOPIC_ARN for one command"
        )


def load_environment(env: str, config_dir: str | Path | None = None) -> Settings:
    try:
        return load_settings(env, config_dir)
    except ConfigError as exc:
        raise InfraConfigError(f"cannot synthesize env {env!r}:\n{exc}") from exc


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
    require_deployable(settings)
    require_alarm_topic(settings)
    require_pinned_ami(settings)
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

"""Build the CDK app for one environment from ``config/<env>.yaml`` (what ``app.py`` runs)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import App

from consumer.settings import ConfigError, Settings, load_settings
from infra.errors import InfraConfigError
from infra.stack import ConsumerStack, stack_name

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
# Never shipped to instances: environments, build output, caches, local data, history.
ASSET_EXCLUDE = [
    ".venv",
    "node_modules",
    "cdk.out",
    "var",
    ".git",
    "tests",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "**/__pycache__",
    "*.egg-info",
    "spark-warehouse",
    "metastore_db",
]


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
    """The app and its one stack for ``env``; synth needs no credentials and makes no look-ups."""
    settings = load_environment(env, config_dir)
    app = app or App(outdir=str(outdir) if outdir is not None else None)
    stack = ConsumerStack(
        app,
        stack_name(settings),
        settings=settings,
        source_path=str(source_path),
        asset_exclude=ASSET_EXCLUDE,
    )
    return app, stack

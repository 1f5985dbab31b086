"""Sub-commands of ``consumer``; each module exposes ``register(subparsers)``."""

from __future__ import annotations

import argparse
from typing import Any

from consumer.settings import Settings, load_settings


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """``--env`` and ``--config-dir``, shared by every command that reads settings."""
    parser.add_argument("--env", default="local", help="environment: config/<env>.yaml (default: local)")
    parser.add_argument(
        "--config-dir",
        default=None,
        help="configuration directory (default: $CONSUMER_CONFIG_DIR or ./config)",
    )


def settings_from(args: Any) -> Settings:
    return load_settings(args.env, args.config_dir)

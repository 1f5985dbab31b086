"""CDK entry point: ``cdk synth -c env=prod`` builds the stack of config/prod.yaml.

``-c config_dir=...`` reads another configuration directory (the tests use a copy).
"""

from __future__ import annotations

import sys

from aws_cdk import App

from infra.application import build_app
from infra.errors import InfraError


def main() -> int:
    app = App()
    env = app.node.try_get_context("env") or "local"
    config_dir = app.node.try_get_context("config_dir")
    try:
        build_app(str(env), config_dir=config_dir, app=app)
    except InfraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CDK entry point: ``cdk synth -c env=prod`` builds the stack of config/prod.yaml.

``-c config_dir=...`` reads another configuration directory (the tests use a copy).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import MutableMapping


def acknowledge_node_version(environ: MutableMapping[str, str] = os.environ) -> None:
    """Say to jsii that this machine's Node.js version is known, before jsii starts Node.

    jsii's runtime prints a framed banner when Node's major version is past its end of life for
    jsii; the Python side relays Node's non-protocol lines with ``print(bytes)``, so ``make synth``
    showed it as a column of ``b'!!  Node 20 is end-of-life ...'``. The synth itself is not
    affected. The variables are the ones jsii reads; a value already set wins, and jsii's banner
    for a Node version known to be broken is left alone.
    """
    environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    node = shutil.which(environ.get("JSII_NODE", "node"))
    if node is None:
        return
    try:
        version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return
    major = version.strip().lstrip("v").split(".", 1)[0]
    if major.isdigit():
        environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", major)


def main() -> int:
    acknowledge_node_version()
    # Imported after the acknowledgement: importing aws_cdk starts jsii's Node process.
    from aws_cdk import App

    from infra.application import build_app
    from infra.errors import InfraError

    app = App()
    env = app.node.try_get_context("env") or ""
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

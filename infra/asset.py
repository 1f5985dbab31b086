"""What ships to instances (the CDK asset): an allow-list of the repository plus the wheelhouse.

The asset's hash is taken over these only, so a README or docs edit leaves the launch template (and
the running instances) alone, while a code, config or dependency change rolls the fleet. The
wheelhouse's wheels are the lock's exact files and the product's wheel is built byte-reproducibly
(:mod:`infra.wheelhouse`), so they move the hash only when code or the lock do.
"""

from __future__ import annotations

from pathlib import Path

from infra.wheelhouse import WHEELHOUSE_DIR, stage_asset

# What an instance needs from the repository, and nothing else: the product, the user's processors
# (``consumer new processor NAME`` writes processors/NAME.py; the units run in the unpacked asset,
# whose directory is on ``processing.import_paths``), the configuration, the bootstrap, watchdog and
# lock (``deploy/``), and the project files.
ASSET_INCLUDE = (
    "ground",
    "consumer",
    "tools",
    "processors",
    "config",
    "deploy",
    "pyproject.toml",
    "requirements.txt",
)
# Added when the asset is staged: the locked wheels and the product's wheel.
ASSET_STAGED = (WHEELHOUSE_DIR,)
# Never shipped even inside those: caches and build output.
ASSET_NEVER = ("__pycache__/", "*.pyc", "*.egg-info/", "build/")


def asset_exclude() -> list[str]:
    """``.gitignore``-style patterns (``IgnoreMode.GIT``): everything at the top, except the
    allow-list above."""
    allowed = [
        f"!/{name}/" if name.isidentifier() else f"!/{name}" for name in (*ASSET_INCLUDE, *ASSET_STAGED)
    ]
    return ["/*", *allowed, *ASSET_NEVER]


def staged_asset(source: Path, architecture: str) -> Path:
    """The directory the fleet's asset is made of, for instances of ``architecture``."""
    return stage_asset(source, ASSET_INCLUDE, ASSET_NEVER, architecture)

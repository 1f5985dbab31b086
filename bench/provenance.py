"""Which commit a benchmark measured, and whether its code changed since: git, asked directly.

A row claims the commit checked out when its benchmark ran. That claim is true only if the code the
benchmark measures (bench/measured.py) was exactly that commit's: :func:`uncommitted` lists the
measured paths that differ from it (edited, staged, untracked or deleted), and bench/__main__.py
refuses to write a row while any does, and refuses again if HEAD moved during the run.
:func:`changed_since` is what the freshness test asks: the measured paths that differ between the
row's commit and the working tree.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class ProvenanceError(RuntimeError):
    """Git could not say what a row needs (not a repository, a commit not in this clone's history)."""


def _git(*args: str, root: Path = ROOT) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProvenanceError(f"git {' '.join(args)} could not run: {exc}") from exc
    if done.returncode != 0:
        raise ProvenanceError(f"git {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def head(root: Path = ROOT) -> str:
    """The commit checked out (full hash)."""
    return _git("rev-parse", "--verify", "HEAD^{commit}", root=root).strip()


def uncommitted(paths: Sequence[str], root: Path = ROOT) -> list[str]:
    """The files under ``paths`` that differ from HEAD in the working tree or the index, untracked
    ones included (a new module under a measured folder is measured code too)."""
    output = _git("status", "--porcelain", "--untracked-files=all", "--", *paths, root=root)
    return sorted(line[3:] for line in output.splitlines() if line.strip())


def shallow(root: Path = ROOT) -> bool:
    """Is this clone shallow (``git clone --depth``)? Then the commits rows were measured on are not
    in it, and whether their code changed since cannot be told."""
    return _git("rev-parse", "--is-shallow-repository", root=root).strip() == "true"


def known(commit: str, root: Path = ROOT) -> bool:
    """Is ``commit`` in this clone's history? (Not in a shallow clone that stops before it, nor
    after a rebase or squash dropped it.)"""
    try:
        _git("cat-file", "-e", f"{commit}^{{commit}}", root=root)
    except ProvenanceError:
        return False
    return True


def changed_since(commit: str, paths: Sequence[str], root: Path = ROOT) -> list[str]:
    """The files under ``paths`` that differ between ``commit`` and the working tree: changed in a
    later commit, or edited and not yet committed (untracked files included), so the freshness test
    fails on the edit, before a commit makes CI fail on it. Renames count as both names: a measured
    file moved away has changed."""
    if not known(commit, root):
        raise ProvenanceError(
            f"commit {commit} is not in this clone's history (a shallow clone, or a rebased or "
            "squashed branch): fetch the full history, or re-run the benchmark"
        )
    output = _git("diff", "--name-only", "--no-renames", commit, "HEAD", "--", *paths, root=root)
    committed = {line for line in output.splitlines() if line}
    return sorted(committed | set(uncommitted(paths, root)))

"""Revert one fix in a copy of the tree and run the whole-worker checker until it objects.

Issues 15 and 35 ask that the checker fail with each fix reverted: the lease core's (issue 15) and
delivery's (issue 35: lanes, the failure path, deferred checkpoints, windows). Each entry of REVERTS
is a text substitution on the current code (path, what is there now, what it becomes with the fix
undone); an entry that no longer matches stops with an AssertionError naming it, so drift is loud.
The copy goes to /tmp/revert-check/<name>/ and is imported ahead of the working tree. Histories are
simulation/histories.py's, the processor's form cycling with the seed (KINDS[seed % 5]: 1 is
lanes, 2 windows, 3 the class form, 4 the change-log sink, 0 the function form on one lane).

    .venv/bin/python scripts/revert_check.py NAME FIRST_SEED COUNT     # e.g. consistent_reread 0 600
    .venv/bin/python scripts/revert_check.py NAME directed             # the directed histories
    .venv/bin/python scripts/revert_check.py NAME tests PATH...        # chosen test files
    PROCS=1 FIRST=2 ...   # processes (default 2); stop after this many violating seeds (default 1)
    KIND=windows ...      # every seed with this processor form (a fix that matters for one form)

The directed histories are tests/simulation/test_directed.py (the lease core's moments),
test_directed_delivery.py and test_directed_hand_over.py (delivery's), test_directed_store.py (the
DynamoDB store's): ``directed`` runs them in the reverted copy. The fixes and their edits are in scripts/reverts.py.

``none`` reverts nothing: a sweep of the product itself. ``A+B`` reverts both A and B (a fix whose
absence another defence covers fails only with that one reverted too).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from reverts import REVERTS  # noqa: E402  (scripts/ is on sys.path when this runs as a script)


def prepare(name: str) -> Path:
    target = Path("/tmp/revert-check") / name
    shutil.rmtree(target, ignore_errors=True)
    folders = ("ground", "consumer", "deploy", "infra", "simulation", "tools", "tests", "config", "docs")
    # What tests import besides the product: the example processors, bench's models, the pipeline.
    for folder in (*folders, "examples", "bench", "pipeline", "emulator"):
        shutil.copytree(ROOT / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for file in ("app.py", "cdk.json", "pyproject.toml"):
        shutil.copy2(ROOT / file, target / file)
    for built in ("node_modules", "var"):  # built artefacts: linked
        if (ROOT / built).exists():
            (target / built).symlink_to(ROOT / built)
    for path, old, new in [change for part in name.split("+") for change in REVERTS[part]]:
        text = (target / path).read_text()
        assert text.count(old) == 1, (
            f"{name}: {path} no longer holds the fixed text ({text.count(old)} matches)"
        )
        (target / path).write_text(text.replace(old, new))
    return target


DIRECTED = (
    "tests/simulation/test_directed.py",
    "tests/simulation/test_directed_delivery.py",
    "tests/simulation/test_directed_hand_over.py",
    "tests/simulation/test_directed_store.py",
)


def one(seed: int) -> tuple[int, str | None]:
    import logging

    from simulation.histories import KINDS, history

    logging.disable(logging.CRITICAL)
    kind = os.environ.get("KIND") or KINDS[seed % len(KINDS)]
    if kind not in KINDS:
        raise SystemExit(f"KIND={kind!r}: one of {', '.join(KINDS)}")
    _, verdict = history(seed, kind=kind)
    return seed, None if verdict.ok else str(verdict)


def directed(name: str, target: Path) -> int:
    """Run the directed histories (:data:`DIRECTED`) in the reverted copy; print which broke."""
    return tests(name, target, list(DIRECTED))


def tests(name: str, target: Path, paths: list[str]) -> int:
    """Run the given test files (or node ids) in the reverted copy; print what broke."""
    import subprocess

    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(target)]
    command += ["-o", "addopts=", "--tb=line", *(str(target / path) for path in paths)]
    result = subprocess.run(
        command,
        check=False,
        cwd=target,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
    )
    for line in result.stdout.splitlines():
        if line.startswith(("FAILED", "E   ")) or " passed" in line or " failed" in line:
            print(f"[{name}] {line[:600]}")
    return 0


def main() -> int:
    name = sys.argv[1]
    if sys.argv[2] == "directed":
        return directed(name, prepare(name))
    if sys.argv[2] == "tests":
        return tests(name, prepare(name), sys.argv[3:])
    first, count = int(sys.argv[2]), int(sys.argv[3])
    procs, stop_after = int(os.environ.get("PROCS", "2")), int(os.environ.get("FIRST", "1"))
    sys.path.insert(0, str(prepare(name)))
    started, bad = time.monotonic(), []
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        for seed, verdict in pool.imap_unordered(one, range(first, first + count), chunksize=5):
            if verdict:
                bad.append(seed)
                print(f"[{name}] seed {seed}: {verdict[:400]}", flush=True)
                if len(bad) >= stop_after:
                    pool.terminate()
                    break
    elapsed = time.monotonic() - started
    print(f"[{name}] bad {len(bad)} of {count} seeds from {first} in {elapsed:.0f} s: {sorted(bad)[:20]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

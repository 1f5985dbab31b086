"""Every module of consumer/ imports on its own, in a fresh interpreter (issue 18: an import circle
made ``import consumer.sinks.changelog`` fail unless consumer.processing had been imported first;
a test process that imports everything up front never notices such a circle)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def modules() -> list[str]:
    found = []
    for path in sorted((ROOT / "consumer").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _import_alone(module: str) -> str | None:
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if result.returncode == 0:
        return None
    return (
        f"{module}: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}"
    )


def test_every_module_of_consumer_imports_in_a_fresh_interpreter() -> None:
    names = modules()
    assert "consumer.sinks.changelog" in names and len(names) > 50
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for f in pool.map(_import_alone, names) if f]
    assert not failures, "\n".join(failures)

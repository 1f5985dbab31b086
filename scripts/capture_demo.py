"""Run `consumer demo` and keep what it printed and drew in the docs: the abridged capture in
docs/demo.md (between its demo-capture markers) and the run's dashboard as docs/dashboard.png.

    PYTHONPATH=. .venv/bin/python scripts/capture_demo.py   # under `flock /tmp/heavy.lock` on a shared machine

The demo runs as `make demo` runs it (`--env local`, the machine's environment, so
CONSUMER_ENDPOINT_URL moves it off a taken port). Nothing is written unless its verdict is clean.
tests/e2e/test_demo.py fails when the capture no longer has the shape of what the demo prints, and
tests/unit/demo/test_docs_capture.py when the picture's panels are not the dashboard's.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools.demo.capture import END, START, abridge  # noqa: E402  (after the path above)

DEMO_DOC = ROOT / "docs" / "demo.md"
PICTURE = ROOT / "docs" / "dashboard.png"


def main() -> int:
    environ = {**os.environ, "COLUMNS": "120"}
    command = [sys.executable, "-m", "tools.cli", "demo", "--env", "local"]
    run = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, check=False)
    output = run.stdout + run.stderr
    (ROOT / "var" / "demo" / "output.txt").write_text(output, encoding="utf-8")
    if run.returncode != 0 or "VERDICT: nothing lost, nothing reordered" not in output:
        print(output[-4000:])
        print(f"the demo exited {run.returncode}: docs left as they were", file=sys.stderr)
        return 1
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    block = "\n".join(abridge(output))
    text = DEMO_DOC.read_text(encoding="utf-8")
    head, tail = text[: text.index(START) + len(START)], text[text.index(END) :]
    note = f"\nCaptured {day} on commit {commit} by `scripts/capture_demo.py`:\n\n"
    DEMO_DOC.write_text(f"{head}{note}```\n{block}\n```\n{tail}", encoding="utf-8")
    shutil.copy(ROOT / "var" / "demo" / "dashboard.png", PICTURE)
    print(f"updated {DEMO_DOC} ({len(block.splitlines())} lines) and {PICTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

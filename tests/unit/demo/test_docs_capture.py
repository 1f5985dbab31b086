"""The docs' picture and captured run are drawn from today's demo: docs/dashboard.png names in its
own text the panels it shows, and they must be the panels the dashboard draws for env local; the
capture in docs/demo.md is what scripts/capture_demo.py keeps of a run (tests/e2e/test_demo.py
compares its lines with a real run's)."""

from __future__ import annotations

from pathlib import Path

from ground.settings import load_settings
from tools.dashboard.render import panels_of
from tools.dashboard.widgets import widgets_for
from tools.demo.capture import abridge, captured, shape, stale_lines

REPO = Path(__file__).resolve().parents[3]


def test_the_docs_picture_shows_the_panels_the_dashboard_draws() -> None:
    settings = load_settings("local", REPO / "config", environ={})
    assert panels_of(REPO / "docs" / "dashboard.png") == [w.title for w in widgets_for(settings)]


def test_the_capture_is_a_kept_run_with_a_clean_verdict() -> None:
    lines = captured((REPO / "docs" / "demo.md").read_text(encoding="utf-8"))
    assert lines[-1] == "VERDICT: nothing lost, nothing reordered"
    assert any(line.startswith("t+0s started ") for line in lines)
    # Nothing in it that the script would not keep (the capture leaves out the verdict table's title).
    first_row = next(i for i, line in enumerate(lines) if line.startswith("│"))
    assert abridge("\n".join([*lines[:first_row], "verdict", *lines[first_row:]])) == lines


OUTPUT = """\
─── dynamodb-stream-fleet demo ───
live dashboard: http://127.0.0.1:40123/ (the dashboard's panels ...)
t+  1s  writes 40 (40/s)  delivered 0 (0/s)  backlog 40
t+ 14s  writes 560 (40/s)  delivered 560 (40/s)  backlog 0
│ worker-1 │ killed │ 0 │
t+0s started 3 workers and the load (40 writes/s for 14 s)
t+2s worker-2 asked worker-3 for 120-6307007d
t+7s SIGKILL worker-1 (it held leases)
[1/4] change log /tmp/x/changelog: 30 object(s) to read, 0 already merged
                  verdict
│ figure │ value │
│ lost   │     0 │
VERDICT: nothing lost, nothing reordered
"""


def test_a_capture_is_stale_when_a_line_every_run_prints_changed_shape() -> None:
    kept = abridge(OUTPUT)
    assert kept[0].startswith("t+ 14s") and kept[-1].startswith("VERDICT") and "│ figure" not in "".join(kept)
    assert "live dashboard" not in "".join(kept) and "killed" not in "".join(kept)  # live view rows: not kept
    assert "│ lost   │     0 │" in kept
    old = [
        "t+ 62s  writes 2400 (39/s)  delivered 2400 (39/s)  backlog 0",
        "t+30s SIGKILL worker-4 (it held leases)",
        "t+9s worker-1 asked worker-4 for 615-86ad211c",  # depends on timing: not required
        "[1/4] change log var/changelog: 1138 object(s) to read, 0 already merged",
        "[4/4] pointer var/snapshot/CURRENT -> version 000001 (262 items)",  # no longer printed
        "│ lost                                       │       0 │",
    ]
    assert stale_lines(old, OUTPUT.splitlines()) == [
        "[4/4] pointer var/snapshot/CURRENT -> version 000001 (262 items)"
    ]
    assert shape("t+3s worker-12 asked worker-3 for 120-c33cc60b") == "t+#s worker-# asked worker-# for #-#"
    # A worker killed mid-write leaves a temporary file the pipeline names and ignores (CI's run did).
    ignored = (
        "[1/4] change log var/changelog: 727 object(s) to read, 0 already merged, 1 other file(s) ignored"
    )
    assert shape(ignored) == shape("[1/4] change log var/changelog: 30 object(s) to read, 0 already merged")


def test_a_spark_step_s_long_line_is_printed_whole_at_any_console_width() -> None:
    """The demo prints each Spark step's output through its console; wrapped at the console's width
    (COLUMNS=120 in the e2e test, whose change log sits under a long pytest directory) the [1/4]
    line became two and no longer matched docs/demo.md's capture (CI, twice)."""
    import io
    import sys

    from rich.console import Console

    from tools.commands.demo import _step

    line = "[1/4] change log /tmp/" + "d" * 150 + "/changelog: 727 object(s) to read, 0 already merged"
    out = io.StringIO()
    code, _ = _step(Console(file=out, width=60), "snapshot", [sys.executable, "-c", f"print({line!r})"])
    assert code == 0 and line in out.getvalue().splitlines()

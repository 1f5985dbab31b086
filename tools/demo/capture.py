"""The captured run in docs/demo.md, and what makes a capture still true of today's demo.

``python scripts/capture_demo.py`` runs ``consumer demo`` and keeps an abridged copy of what it
printed (:func:`abridge`: the live view's last frame line, the event log, the Spark steps, the
verdict) in docs/demo.md, with the run's dashboard as docs/dashboard.png. ``tests/e2e/test_demo.py``
runs the demo itself and compares (:func:`stale_lines`): every line of the capture that every run
prints (a fixed line of the script, a Spark step, a verdict row) must have the shape of a line this
run printed, numbers, shard ids and worker names aside. A capture taken before the product changed
what it prints fails there, naming the lines to take again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

START, END = "<!-- demo-capture:start -->", "<!-- demo-capture:end -->"
# The lines of a run worth keeping, in the order the demo prints them.
_FRAME = re.compile(r"^t\+\s*\d+s\s+writes \d+")
_EVENT = re.compile(r"^t\+\d+s ")
_SPARK = re.compile(r"^\[(\d/\d|bootstrap)\] ")
_VERDICT_ROW = re.compile(r"^│ .+ │ .+ │$")
_VERDICT_TITLE = re.compile(r"^\s*verdict(: .*)?\s*$")
_BOOTSTRAP = re.compile(r"^\d+ items written before the table had a stream")
# Event lines whose occurrence depends on the timing of one run (who asked whom, which shard ended
# when): a capture may show them and a test run may not.
_TIMING = re.compile(r" asked \S+ for | took \S+ over from |: shard \S+ ended| lost \S+")


def abridge(output: str) -> list[str]:
    """The lines of a demo's output the capture keeps: the live view's last frame line, the bootstrap,
    the events, the Spark steps, the verdict's rows and its last line."""
    lines = [line.rstrip() for line in output.splitlines()]
    frames = [line for line in lines if _FRAME.match(line)]
    kept = frames[-1:]
    in_verdict = False  # the live view's tables have rows too: only the verdict's are kept
    for line in lines:
        if _VERDICT_TITLE.match(line):
            in_verdict = True
        if _FRAME.match(line):
            continue
        row = in_verdict and _VERDICT_ROW.match(line) and "figure" not in line
        if (
            row
            or _BOOTSTRAP.match(line)
            or _EVENT.match(line)
            or _SPARK.match(line)
            or line.startswith("VERDICT")
        ):
            kept.append(line)
    return kept


def shape(line: str) -> str:
    """A line with what changes from run to run taken out: numbers, shard ids, worker names, paths,
    and the change log's count of other files (a worker the demo kills mid-write leaves its
    temporary ``.part`` file, which the pipeline names and ignores)."""
    line = re.sub(r", \d+ other file\(s\) ignored$", "", line)
    line = re.sub(r"[\w.~-]*(?:/[\w.-]+)+/?", lambda m: "PATH" if re.search("[A-Za-z]", m[0]) else m[0], line)
    line = re.sub(r"worker-\d+", "worker-#", line)
    line = re.sub(r"\b[0-9a-f]{8}\b", "#", line)
    line = re.sub(r"\d+(\.\d+)?", "#", line)
    line = re.sub(r"\s+", " ", line)
    return line.strip()


def always_printed(line: str) -> bool:
    """A captured line every run prints in some form (timing-dependent events are not)."""
    return not (_EVENT.match(line) and _TIMING.search(line))


def stale_lines(capture: Sequence[str], run: Iterable[str]) -> list[str]:
    """The capture's lines that every run prints but whose shape this run's output does not have."""
    shapes = {shape(line) for line in run}
    return [line for line in capture if always_printed(line) and shape(line) not in shapes]


def captured(markdown: str) -> list[str]:
    """The captured lines in docs/demo.md (the fenced block between the markers)."""
    block = markdown[markdown.index(START) + len(START) : markdown.index(END)]
    fenced = re.search(r"```\n(.*?)```", block, re.S)
    if fenced is None:
        raise ValueError("docs/demo.md's capture holds no ``` fence")
    return [line for line in fenced.group(1).splitlines() if line.strip()]

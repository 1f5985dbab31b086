"""bench/results.json, the benchmarks' record, and bench/RESULTS.md, rendered from it.

``python -m bench`` (bench/__main__.py) is the only writer of both: it replaces the runs of the
benchmarks it ran, keeps the others' as they were measured, drops those of benchmarks that no longer
exist, and renders RESULTS.md from the whole record (``python -m bench --render`` renders only,
e.g. after a merge). Each run keeps every value of every ratio, the commit it was measured on and
the machine, so the verdicts and the freshness check (tests/unit/bench/test_results_current.py) are
computed, never copied.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import provenance
from bench.common import Ratio
from bench.measured import measured_paths

HERE = Path(__file__).resolve().parent
RECORD = HERE / "results.json"
RESULTS = HERE / "RESULTS.md"
LEGACY = "none"  # the commit of a run measured before runs carried theirs

HEADER = """\
# Benchmark results

Written by `python -m bench` from bench/results.json; never edited by hand (`python -m bench --render`
rewrites this file from the record). Each row is one figure of one run of its benchmark, measured on
the commit in its row with no uncommitted change to the code it measures (bench/measured.py declares
that code); tests/unit/bench/test_results_current.py fails, naming the benchmark to re-run, once any
of that code changes.

- **spread**: min / median / max over the run's values (repeats in fresh processes, or what the
  method names: cells, deploys, joins); "one value" where there is one.
- **verdict**: `ok` when the median meets the goal and the worst value meets the goal too, or the
  looser worst-value bound the goal states in brackets; `short` otherwise; `stated` for a figure with
  no goal, reported beside the others.
- **basis**: `measured` when both sides of the ratio are measured in the same run; otherwise it
  says which side is a model (a formula, a simulated clock or fleet).
- **commit** `none`: measured before runs carried their commit (and their basis: `not recorded`);
  such a row is stale by definition until its benchmark runs again.
"""


@dataclass(frozen=True)
class Run:
    """One benchmark's last run: its ratios, or why it failed."""

    bench: str
    commit: str
    ran_at: str
    machine: str
    seconds: float
    ratios: tuple[Ratio, ...] = ()
    failed: str = ""
    limits: str = field(default="", compare=False)

    @property
    def short_commit(self) -> str:
        return self.commit[:10]


def _ratio(data: dict[str, Any]) -> Ratio:
    return Ratio(
        data["name"],
        tuple(float(v) for v in data["values"]),
        data["goal"],
        bool(data["ok"]),
        data["method"],
        data.get("worst"),
        data.get("model", ""),
    )


def load(path: Path = RECORD) -> list[Run]:
    if not path.exists():
        return []
    runs = []
    for data in json.loads(path.read_text(encoding="utf-8"))["runs"]:
        ratios = tuple(_ratio(r) for r in data.pop("ratios"))
        runs.append(Run(ratios=ratios, **data))
    return runs


def dump(runs: Sequence[Run], path: Path = RECORD) -> None:
    body = [
        {**{k: v for k, v in asdict(run).items() if k != "ratios"}, "ratios": [asdict(r) for r in run.ratios]}
        for run in runs
    ]
    path.write_text(json.dumps({"runs": body}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def merged(old: Iterable[Run], new: Iterable[Run], benchmarks: Sequence[str]) -> list[Run]:
    """The record after a run: ``new`` replaces ``old`` per benchmark; a benchmark no longer in
    ``benchmarks`` is dropped; the order is ``benchmarks``'."""
    by_name = {run.bench: run for run in old}
    by_name.update({run.bench: run for run in new})
    return [by_name[name] for name in benchmarks if name in by_name]


def stale(runs: Iterable[Run], root: Path = provenance.ROOT) -> dict[str, str]:
    """The runs whose rows are no longer true of the code in ``root``'s working tree, by benchmark,
    each with why: measured before runs carried a commit, failed, measured on a commit this clone
    does not have, or measured on a commit after which some of the code it measures
    (bench/measured.py) changed, in a later commit or in an edit not yet committed.
    tests/unit/bench/test_results_current.py asks this of the record."""
    found = {}
    for run in runs:
        why = _why_stale(run, root)
        if why is not None:
            found[run.bench] = why
    return found


def _why_stale(run: Run, root: Path) -> str | None:
    if run.commit == LEGACY:
        return "measured before runs carried their commit"
    if run.failed:
        return f"failed on {run.short_commit}: {run.failed}"
    try:
        changed = provenance.changed_since(run.commit, measured_paths(run.bench), root)
    except provenance.ProvenanceError as exc:
        return str(exc)
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        return f"measured on {run.short_commit}; changed since: {shown}"
    return None


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def render(runs: Sequence[Run]) -> str:
    lines = [
        HEADER,
        "| benchmark | ratio | median | spread | goal | verdict | basis | commit | method |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        if run.failed:
            lines.append(
                f"| {run.bench} | — | — | — | — | failed: {_cell(run.failed)} | — | {run.short_commit} | |"
            )
        for ratio in run.ratios:
            basis = f"model: {ratio.model}" if ratio.model else "measured"
            if run.commit == LEGACY and not ratio.model:
                basis = "not recorded"  # a legacy row never said which side was measured
            lines.append(
                f"| {run.bench} | {ratio.name} | {ratio.median:.3f} | {ratio.spread()} | {ratio.goal_text} | "
                f"{ratio.verdict} | {_cell(basis)} | {run.short_commit} | {_cell(ratio.method)} |"
            )
    lines += [
        "",
        "## Runs",
        "",
        "| benchmark | commit | ran at | seconds | machine |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {run.bench} | {run.commit} | {run.ran_at} | {f'{run.seconds:.0f}' if run.seconds else '—'} | "
        f"{_cell(run.machine)} |"
        for run in runs
    ]
    short = [run for run in runs if any(r.verdict == "short" for r in run.ratios)]
    if short:
        lines += ["", "## Where a goal is missed, and what limits it", ""]
        lines += [f"- **{run.bench}**: {run.limits or '(no explanation recorded)'}" for run in short]
    return "\n".join(lines) + "\n"

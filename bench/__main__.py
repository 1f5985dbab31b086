"""Run every benchmark module and write bench/RESULTS.md.

Each module under ``bench/`` listed in ``BENCHMARKS`` exposes ``run() -> list[Ratio]`` and prints
its method, parameters and figures as it goes; this runner collects the ratios into RESULTS.md with
the date and the machine description.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import sys
import traceback
from pathlib import Path

from bench.common import Ratio, machine

BENCHMARKS: tuple[str, ...] = (
    "lease_cost",
    "discovery_scale",
    "brownout",
    "rolling_deploy",
    "taker_scale",
    "whole_worker",
    "operations",
    "spark_snapshot",
    "pipeline_table",
    "lake_freshness",
    "lake_maintenance",
    "record_cpu",
    "throughput",
    "memory",
    "failover",
    "child_pickup",
    "stall_move",
    "rebalance",
    "latency",
    "worker_cpu",
    "parallel",
    "poison_key",
)
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def previous_sections(text: str, rerun: set[str]) -> tuple[list[str], list[str]]:
    """Table rows and limit notes of benchmarks *not* in ``rerun``, kept from an earlier RESULTS.md
    so that running a subset updates its own rows without losing the others'."""
    rows, notes = [], []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| benchmark ", "|---")):
            name = line.split("|")[1].strip()
            if name not in rerun:
                rows.append(line)
        elif line.startswith("- **"):
            name = line[4:].split("**", 1)[0]
            if name not in rerun:
                notes.append(line)
    return rows, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    args = parser.parse_args(argv)
    names = args.names or list(BENCHMARKS)
    results: list[tuple[str, list[Ratio] | str]] = []
    limits: dict[str, str] = {}
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        try:
            module = importlib.import_module(f"bench.{name}")
            limits[name] = getattr(module, "LIMITS", "")
            results.append((name, module.run()))
        except Exception:
            traceback.print_exc()
            results.append((name, "failed: " + traceback.format_exc(limit=1).strip().splitlines()[-1]))
    kept_rows: list[str] = []
    kept_notes: list[str] = []
    if args.names and RESULTS.exists():
        kept_rows, kept_notes = previous_sections(RESULTS.read_text(encoding="utf-8"), set(names))
    lines = [
        "# Benchmark results",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine()}"
        + (f" ({', '.join(names)}; other rows are kept from earlier runs)." if kept_rows else "."),
        "Every figure is a ratio of two measurements taken in the same run; min / median / max over repeats.",
        "",
        "| benchmark | ratio | median | spread | goal | verdict | method |",
        "|---|---|---|---|---|---|---|",
    ]
    failed = False
    lines += kept_rows
    for name, outcome in results:
        if isinstance(outcome, str):
            failed = True
            lines.append(f"| {name} | — | — | — | — | {outcome} | |")
            continue
        for ratio in outcome:
            print(ratio.line())
            verdict = "ok" if ratio.ok else "short"
            lines.append(
                f"| {name} | {ratio.name} | {ratio.median:.3f} | {ratio.spread()} | {ratio.goal} | "
                f"{verdict} | {ratio.method} |"
            )
    short = [
        name for name, outcome in results if not isinstance(outcome, str) and any(not r.ok for r in outcome)
    ]
    if short or kept_notes:
        lines += ["", "## Where a goal is missed, and what limits it", ""]
        lines += kept_notes
        lines += [f"- **{name}**: {limits.get(name) or '(no explanation recorded)'}" for name in short]
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"\nwrote {RESULTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

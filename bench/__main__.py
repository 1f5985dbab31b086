"""Run benchmarks and record their figures: ``python -m bench [names]`` (all of them by default).

Each module under ``bench/`` listed in ``BENCHMARKS`` exposes ``run() -> list[Ratio]`` and prints
its method, parameters and figures as it goes. This runner is the only writer of bench/results.json
(every value of every ratio, per benchmark run) and of bench/RESULTS.md, rendered from it
(bench/results.py); nobody edits either by hand.

Rows that cannot go stale:

- **Provenance.** A run records the commit checked out (``git rev-parse HEAD``). Before running, the
  runner refuses (exit 2, nothing run) if any file of the code the chosen benchmarks measure
  (bench/measured.py: each benchmark's modules and the product code on its path) differs from that
  commit -- edited, staged, untracked or deleted -- so a row never claims a commit it did not
  measure; after each benchmark it checks again, and that HEAD did not move, before recording it.
  ``--no-write`` runs and prints without recording (for a tree with uncommitted work).
- **Freshness.** tests/unit/bench/test_results_current.py (in ``make test``) fails when a measured
  file changed between a run's commit and HEAD, naming the benchmark to re-run; also when a
  benchmark has no run, when RESULTS.md is not the rendering of results.json, or when a verdict is
  not the rule's.
- **Only what exists.** Running a subset replaces those benchmarks' runs and keeps the others' as
  measured; the run of a benchmark no longer in ``BENCHMARKS`` is dropped.
- **Verdicts** (bench/common.py ``Ratio.verdict``): a figure without a goal is ``stated``, never
  ``ok``. A goal holds (``ok``) when the median meets it and so does the worst value -- the largest
  for ``<=``, the smallest for ``>=`` -- unless the row states a looser bound for the worst value
  (``<=1.2 (worst <=1.6)``); every value for ``=``. Otherwise ``short``.
- **Basis.** A figure is a ratio of two measurements taken in the same run, or its row says which
  side is a model (``Ratio.model``: a formula, a simulated fleet or clock).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import sys
import time
import traceback

from bench import provenance, results
from bench.common import machine
from bench.measured import measured_paths

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
    "kinesis_throughput",
)


def _run_one(name: str) -> results.Run:
    """Run benchmark ``name`` in this process; its run as recorded (the commit is filled in later)."""
    print(f"\n=== {name} ===", flush=True)
    started = time.perf_counter()
    ran_at = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    try:
        module = importlib.import_module(f"bench.{name}")
        ratios = tuple(module.run())
        failed = ""
    except Exception:
        traceback.print_exc()
        ratios, failed = (), traceback.format_exc(limit=1).strip().splitlines()[-1]
        module = None
    for ratio in ratios:
        print(ratio.line())
    limits = str(getattr(module, "LIMITS", "")) if module is not None else ""
    return results.Run(name, "", ran_at, machine(), time.perf_counter() - started, ratios, failed, limits)


def _clean(names: list[str]) -> tuple[str, list[str]]:
    """HEAD, and the measured files of ``names`` that differ from it."""
    paths = sorted({path for name in names for path in measured_paths(name)})
    return provenance.head(), provenance.uncommitted(paths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--render", action="store_true", help="rewrite RESULTS.md from results.json only")
    parser.add_argument("--no-write", action="store_true", help="run and print; record nothing")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"no such benchmark: {', '.join(unknown)} (they are: {', '.join(BENCHMARKS)})")
    if args.render:
        _write(results.merged(results.load(), [], BENCHMARKS))
        return 0
    names = args.names or list(BENCHMARKS)
    if args.no_write:
        return 1 if any(_run_one(name).failed for name in names) else 0
    commit, dirty = _clean(names)
    if dirty:
        print(
            f"refusing to record: the code these benchmarks measure differs from {commit[:10]} "
            f"({', '.join(dirty[:10])}{' ...' if len(dirty) > 10 else ''}); commit it, or run with --no-write",
            file=sys.stderr,
        )
        return 2
    recorded: list[results.Run] = []
    refused: list[str] = []
    for name in names:
        run = _run_one(name)
        now, dirty = _clean([name])
        if now != commit or dirty:
            refused.append(f"{name} (HEAD {now[:10]}, changed {', '.join(dirty) or 'nothing'})")
            continue
        recorded.append(dataclasses.replace(run, commit=commit))
        _write(results.merged(results.load(), recorded, BENCHMARKS))  # a long run keeps what it has
    if refused:
        print(f"not recorded, the code changed during the run: {'; '.join(refused)}", file=sys.stderr)
    return 1 if refused or any(run.failed for run in recorded) else 0


def _write(runs: list[results.Run]) -> None:
    results.dump(runs)
    results.RESULTS.write_text(results.render(runs), encoding="utf-8")
    print(f"wrote {results.RECORD} and {results.RESULTS}")


if __name__ == "__main__":
    sys.exit(main())

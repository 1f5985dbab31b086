"""bench/RESULTS.md holds only figures that are true of the code as it is.

Every benchmark in ``python -m bench`` has a run in bench/results.json, measured on a commit of this
clone's history, and none of the code it measures (bench/measured.py) changed since that commit;
RESULTS.md is the rendering of that record. A failure names the benchmarks to re-run.
"""

from __future__ import annotations

import pytest

from bench import provenance, results
from bench.__main__ import BENCHMARKS
from bench.measured import PRODUCT, ROOT, measured_paths


def test_every_row_was_measured_on_the_code_as_it_is() -> None:
    if provenance.shallow():
        pytest.skip("a shallow clone lacks the commits the rows were measured on: `git fetch --unshallow`")
    stale = results.stale(results.load())
    assert not stale, (
        f"bench/RESULTS.md rows no longer true of the code: re-run `python -m bench {' '.join(stale)}` "
        "on a clean commit\n" + "\n".join(f"  {bench}: {why}" for bench, why in stale.items())
    )


def test_every_benchmark_has_a_run_and_every_run_a_benchmark() -> None:
    recorded = [run.bench for run in results.load()]
    missing = [name for name in BENCHMARKS if name not in recorded]
    gone = [name for name in recorded if name not in BENCHMARKS]
    assert not missing, f"no run recorded: run `python -m bench {' '.join(missing)}`"
    assert not gone, f"runs of benchmarks that no longer exist: {gone}; `python -m bench --render` drops them"


def test_results_md_is_the_rendering_of_the_record() -> None:
    rendered = results.render(results.load())
    assert results.RESULTS.read_text(encoding="utf-8") == rendered, (
        "bench/RESULTS.md is not what `python -m bench --render` writes from bench/results.json: "
        "it is written by the bench only, never by hand"
    )


def test_every_benchmark_declares_code_that_exists() -> None:
    assert set(PRODUCT) == set(BENCHMARKS), "bench/measured.py declares the code of every benchmark, no other"
    for name in BENCHMARKS:
        for path in measured_paths(name):
            assert (ROOT / path).exists(), (
                f"{name} measures {path}, which does not exist: fix bench/measured.py"
            )

"""The machinery behind rows that cannot go stale: git's answers, the runner's refusals, the verdict rule,
and the record's merge and rendering (a throwaway repository, no benchmark run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import bench.__main__ as runner
from bench import provenance, results
from bench.common import Ratio, at_least, at_most, meets, stated
from bench.measured import bench_modules


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "bench@example.com")
    _git(tmp_path, "config", "user.name", "bench")
    (tmp_path / "consumer" / "records").mkdir(parents=True)
    (tmp_path / "consumer" / "records" / "wire.py").write_text("X = 1\n")
    (tmp_path / "other.py").write_text("Y = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "measured")
    return tmp_path


def test_a_change_to_measured_code_after_the_commit_is_named(repo: Path) -> None:
    measured = provenance.head(repo)
    assert provenance.changed_since(measured, ["consumer/"], repo) == []
    (repo / "other.py").write_text("Y = 2\n")  # not measured
    _git(repo, "commit", "-q", "-am", "elsewhere")
    assert provenance.changed_since(measured, ["consumer/"], repo) == []
    (repo / "consumer" / "records" / "wire.py").write_text("X = 1  # a comment is a change too\n")
    _git(repo, "commit", "-q", "-am", "touch")
    assert provenance.changed_since(measured, ["consumer/"], repo) == ["consumer/records/wire.py"]


def test_an_edit_not_yet_committed_is_a_change_too(repo: Path) -> None:
    measured = provenance.head(repo)
    (repo / "other.py").write_text("Y = 2\n")  # not measured
    assert provenance.changed_since(measured, ["consumer/"], repo) == []
    (repo / "consumer" / "records" / "wire.py").write_text("X = 2\n")
    (repo / "consumer" / "records" / "new.py").write_text("Z = 1\n")
    assert provenance.changed_since(measured, ["consumer/"], repo) == [
        "consumer/records/new.py",
        "consumer/records/wire.py",
    ]
    _git(repo, "checkout", "-q", "--", "consumer/records/wire.py")
    (repo / "consumer" / "records" / "new.py").unlink()
    assert provenance.changed_since(measured, ["consumer/"], repo) == []


def test_the_freshness_check_passes_a_current_run_and_names_a_stale_one(repo: Path) -> None:
    """What tests/unit/bench/test_results_current.py asks of bench/results.json, on a record of its
    own: a run on HEAD is current until a file its benchmark measures changes in a later commit."""

    def run(bench: str, commit: str, failed: str = "") -> results.Run:
        return results.Run(bench, commit, "now", "here", 1.0, (stated("r", (1.0,), "m"),), failed)

    measured = provenance.head(repo)
    record = [run("record_cpu", measured), run("spark_snapshot", measured)]
    assert results.stale(record, repo) == {}
    (repo / "other.py").write_text("Y = 2\n")  # measured by neither
    _git(repo, "commit", "-q", "-am", "elsewhere")
    assert results.stale(record, repo) == {}
    (repo / "consumer" / "records" / "wire.py").write_text("X = 2\n")  # the record path, not the pipeline
    _git(repo, "commit", "-q", "-am", "records")
    assert results.stale(record, repo) == {
        "record_cpu": f"measured on {measured[:10]}; changed since: consumer/records/wire.py"
    }
    now = provenance.head(repo)
    others = [run("a", results.LEGACY), run("record_cpu", now, failed="boom"), run("lease_cost", "0" * 40)]
    found = results.stale(others, repo)
    assert found["a"] == "measured before runs carried their commit"
    assert found["record_cpu"] == f"failed on {now[:10]}: boom"
    assert "not in this clone's history" in found["lease_cost"]


def test_a_shallow_clone_is_told_from_a_full_one(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert provenance.shallow(repo) is False
    (repo / "other.py").write_text("Y = 2\n")
    _git(repo, "commit", "-q", "-am", "second")
    clone = tmp_path_factory.mktemp("clones") / "shallow"  # beside the repository, not inside it
    _git(clone.parent, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    assert provenance.shallow(clone) is True


def test_a_commit_missing_from_the_history_is_an_error_not_a_pass(repo: Path) -> None:
    with pytest.raises(provenance.ProvenanceError, match="not in this clone's history"):
        provenance.changed_since("0" * 40, ["consumer/"], repo)


def test_uncommitted_work_under_measured_paths_is_seen_untracked_files_included(repo: Path) -> None:
    assert provenance.uncommitted(["consumer/"], repo) == []
    (repo / "consumer" / "new_module.py").write_text("Z = 1\n")
    assert provenance.uncommitted(["consumer/"], repo) == ["consumer/new_module.py"]
    (repo / "other.py").write_text("Y = 3\n")
    assert provenance.uncommitted(["consumer/"], repo) == ["consumer/new_module.py"]


def test_the_runner_refuses_to_record_on_uncommitted_measured_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "_clean", lambda names: ("a" * 40, ["consumer/records/wire.py"]))

    def must_not_run(name: str) -> results.Run:
        raise AssertionError("a benchmark ran on uncommitted code")

    monkeypatch.setattr(runner, "_run_one", must_not_run)
    assert runner.main(["record_cpu"]) == 2
    assert "consumer/records/wire.py" in capsys.readouterr().err


def test_the_runner_does_not_record_a_run_during_which_head_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    heads = iter(["a" * 40, "b" * 40])
    monkeypatch.setattr(runner, "_clean", lambda names: (next(heads), []))
    monkeypatch.setattr(runner, "_run_one", lambda name: results.Run(name, "", "now", "here", 1.0))
    written: list[list[results.Run]] = []
    monkeypatch.setattr(runner, "_write", written.append)
    assert runner.main(["record_cpu"]) == 1
    assert written == []


def test_the_verdict_checks_the_median_and_the_worst_value() -> None:
    assert at_most("r", (1.0, 1.1, 1.2), 1.2, "m").verdict == "ok"
    assert at_most("r", (1.0, 1.1, 1.3), 1.2, "m").verdict == "short"  # the worst value crosses the goal
    assert at_most("r", (1.0, 1.1, 1.5), 1.2, "m", worst=1.6).verdict == "ok"  # a stated looser bound
    assert at_most("r", (1.0, 1.3, 1.5), 1.2, "m", worst=1.6).verdict == "short"  # the median crosses
    assert at_least("r", (0.9, 2.0, 2.0), 1.0, "m").verdict == "short"
    assert Ratio("r", (0.0, 1.0), "=0", True, "m").verdict == "short"
    assert stated("r", (5.0,), "m").verdict == "stated"  # never ok
    assert Ratio("r", (0.5,), "<=1", False, "m").verdict == "short"  # a bench may be stricter, not looser
    assert meets("<=1", None, (1.0,))
    with pytest.raises(ValueError, match="a goal is"):
        meets("about 1", None, (1.0,))


def test_a_run_replaces_its_benchmarks_and_a_gone_benchmark_is_dropped() -> None:
    def run(name: str, value: float) -> results.Run:
        return results.Run(name, "c" * 40, "now", "here", 1.0, (at_most(f"{name}_r", (value,), 2, "m"),))

    old = [run("a", 1.0), run("gone", 1.0), run("b", 1.0)]
    record = results.merged(old, [run("b", 3.0)], ("a", "b"))
    assert [(r.bench, r.ratios[0].values) for r in record] == [("a", (1.0,)), ("b", (3.0,))]
    text = results.render(record)
    assert "| b | b_r | 3.000 | one value 3.000 | <=2 | short | measured | cccccccccc |" in text
    assert "gone" not in text


def test_the_record_round_trips(tmp_path: Path) -> None:
    ratio = at_most("r", (1.0, 2.0), 1.5, "method | with a bar", worst=2.5, model="a formula")
    record = [results.Run("x", "d" * 40, "now", "here", 2.0, (ratio,), "", "why")]
    results.dump(record, tmp_path / "r.json")
    assert results.load(tmp_path / "r.json") == record
    assert "| model: a formula |" in results.render(record)


def test_a_benchmark_measures_the_bench_modules_it_uses() -> None:
    modules = bench_modules("record_cpu")
    # imported, and run in a fresh process by name
    assert {"bench/record_cpu.py", "bench/canned.py", "bench/fresh_orjson.py"} <= set(modules)

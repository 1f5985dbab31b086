"""The main job, shortened: `consumer demo` end to end on the emulator (load, workers, a join, a
split, a SIGKILL, drain, Spark snapshot and verify, dashboard) must end with its verdict: nothing
lost, nothing reordered. The chaos variant adds random SIGKILL/SIGSTOP/restarts, stream and table
faults and a slow processor, with the same verdict required. It leaves out the Spark steps
(``--skip-spark``): the plain demo covers them, and under chaos the verdict the test needs is the
fleet's, read from the change log.

``CHAOS_SEEDS=1,2,3`` runs the chaos variant once per seed (``make test`` runs seed 1), on the
table's stream and on a Kinesis stream (``--source kinesis``: a split and a merge under the fleet,
KPL-aggregated records, the verdict from what the workers recorded)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import free_port, wait_for
from tools.dashboard.render import panels_of
from tools.demo.capture import captured, stale_lines

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
CHAOS_SEEDS = [int(s) for s in os.environ.get("CHAOS_SEEDS", "1").split(",") if s.strip()]


def demo_environ(tmp_path: Path, duration: int) -> dict[str, str]:
    return {
        **os.environ,
        "CONSUMER_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "CONSUMER_LOAD__DURATION_SECONDS": str(duration),
        "CONSUMER_PROCESSING__OPTIONS__DESTINATION": str(tmp_path / "changelog"),
        "CONSUMER_PIPELINE__CHANGELOG_URI": str(tmp_path / "changelog"),
        "CONSUMER_PIPELINE__SNAPSHOT_URI": str(tmp_path / "snapshot"),
        "CONSUMER_PIPELINE__STATS_URI": str(tmp_path / "stats"),
        # Rollovers every few seconds so a short run still crosses shard generations.
        "CONSUMER_EMULATOR__ROLLOVER_SECONDS": "6",
        "COLUMNS": "120",
    }


def demo_command(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tools.cli", "demo", "--env", "local", "--config-dir", str(REPO / "config"),
            "--workdir", str(tmp_path / "demo"), *extra]  # fmt: skip


def run_demo(tmp_path: Path, duration: int, *extra: str) -> str:
    """Run ``consumer demo`` and check what every run must show; the Spark steps' lines unless the
    run was given ``--skip-spark``."""
    spark = "--skip-spark" not in extra
    result = subprocess.run(
        demo_command(tmp_path, *extra),
        capture_output=True, text=True, timeout=600, env=demo_environ(tmp_path, duration), cwd=tmp_path,
        check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "VERDICT: nothing lost, nothing reordered" in output
    # The events are printed once (the live view's last frame leaves its events panel out).
    first_event = next(line for line in output.splitlines() if line.startswith("t+0s started "))
    assert output.count(first_event) == 1, output[-6000:]
    # The live dashboard is served while the demo runs, and the demo says where.
    assert re.search(r"^live dashboard: http://127\.0\.0\.1:\d+/ ", output, re.MULTILINE), output[:2000]
    if spark:
        assert "0 missing, 0 extra, 0 stale" in output
        # docs/demo.md's capture and docs/dashboard.png are still what the demo prints and draws.
        capture = captured((REPO / "docs" / "demo.md").read_text(encoding="utf-8"))
        assert stale_lines(capture, output.splitlines()) == [], "docs/demo.md: run scripts/capture_demo.py"
        assert panels_of(tmp_path / "demo" / "dashboard.png") == panels_of(REPO / "docs" / "dashboard.png")
        # Items written before the table had a stream reach the snapshot only through the bootstrap:
        # verify's 0 missing above counts them.
        assert "200 items written before the table had a stream" in output
        assert "[bootstrap] base of 200 item(s) committed" in output
        # The live view's last frame ends its line: the next step's rule starts a line of its own.
        rule = r"^─+ Spark: change log -> current state of the table, then verified against a scan of it ─+$"
        assert re.search(rule, output, re.MULTILINE)
    else:
        assert "Spark" not in output and "bootstrap" not in output
        assert re.search(r"^─+ dashboard ─+$", output, re.MULTILINE)
    assert (tmp_path / "demo" / "dashboard.png").stat().st_size > 10_000
    # Quiet: no warnings from Spark, log4j, the JVM or pandas (`consumer demo -v` shows them).
    noise = [line for line in output.splitlines() if re.search(r"WARN|Warning|log4j|setLogLevel", line)]
    assert not noise, noise
    # The dashboard's writes line: the load generator published TableWrites alongside the workers.
    page = (tmp_path / "demo" / "dashboard.html").read_text()
    assert "<td>TableWrites</td>" in page
    # Every panel of the real run's picture draws lines or says why it has none; no line is
    # missing without a reason (the workers published everything they always publish).
    panels = re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td><td>(.*?)</td></tr>", page)
    assert len(panels) >= 16, page[:2000]
    assert [title for title, lines, notes in panels if int(lines) == 0 and not notes] == []
    assert "UNEXPLAINED" not in page, page
    drawn = {title for title, lines, _ in panels if int(lines) > 0}
    for title in (
        "Leases table: consumed vs provisioned capacity",
        "Cost: stream reads per shard and the leases table",
    ):
        assert title in drawn, title
    return output


def figure(output: str, name: str) -> str:
    match = re.search(rf"│ {re.escape(name)}\s*│\s*([^│]+?)\s*│", output)
    assert match, f"no row {name!r} in the verdict"
    return match.group(1)


def test_demo_verdict(tmp_path: Path) -> None:
    output = run_demo(tmp_path, 14)
    assert "SIGKILL worker-" in output and "joins the fleet" in output and "split: a shard closed" in output
    assert (
        figure(output, "lost") == "0" and figure(output, "per-item order violations (delivery order)") == "0"
    )
    assert int(figure(output, "shards ended")) >= 1  # rollovers and the split closed shards mid-run
    assert figure(output, "changes written") == figure(output, "changes delivered (distinct)")


@pytest.mark.parametrize("seed", CHAOS_SEEDS)
def test_chaos_demo_verdict(tmp_path: Path, seed: int) -> None:
    output = run_demo(tmp_path, 24, "--chaos", str(seed), "--skip-spark")
    for act in (
        "SIGKILL worker-",
        "SIGSTOP worker-",
        "(chaos restart)",
        "stream-faults on",
        "table-faults on",
    ):
        assert act in output, act
    assert figure(output, "  of which unexplained") == "0"
    assert figure(output, "changes written") == figure(output, "changes delivered (distinct)")


@pytest.mark.parametrize("seed", CHAOS_SEEDS)
def test_kinesis_chaos_demo_verdict(tmp_path: Path, seed: int) -> None:
    demo = subprocess.Popen(
        demo_command(tmp_path, "--source", "kinesis", "--chaos", str(seed)), env=demo_environ(tmp_path, 14),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        output, _ = demo.communicate(timeout=300)
    finally:
        if demo.poll() is None:  # SIGTERM: the demo stops its workers and the emulator on the way out
            demo.send_signal(signal.SIGTERM)
            try:
                demo.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                demo.kill()
                demo.communicate()
        logs = tmp_path / "demo" / "logs"
        pids = {int(m) for p in logs.glob("*.log") for m in re.findall(r"@[^:]+:(\d+):", p.read_text())}
        assert not [pid for pid in pids if _alive(pid)], "workers left running after the demo"
    assert demo.returncode == 0, output[-6000:]
    assert "VERDICT: nothing lost, nothing reordered" in output
    assert "the Spark steps are left out" in output and "bootstrap" not in output
    for act in (
        "SIGKILL worker-",
        "(chaos restart)",
        "stream-faults on",
        "table-faults on",
        "split: shard",
        "merge: shards",
    ):
        assert act in output, act
    aggregates = re.search(r"the load put (\d+) user records \((\d+) KPL aggregates", output)
    assert aggregates and int(aggregates.group(2)) > 0, output[-3000:]
    assert figure(output, "user records put (acknowledged)") == aggregates.group(1)
    assert figure(output, "user records delivered (distinct)") == aggregates.group(1)
    assert figure(output, "lost") == "0" and figure(output, "unexpected") == "0"
    assert figure(output, "per-partition-key order violations (delivery order)") == "0"
    assert figure(output, "  of which unexplained") == "0"
    assert int(figure(output, "shards ended")) >= 2  # the split's parent and the merge's two


def test_sigterm_stops_the_demo_and_every_process_it_started(tmp_path: Path) -> None:
    """A CI job's timeout sends SIGTERM: the workers (and the emulator) must not outlive the demo."""
    demo = subprocess.Popen(
        demo_command(tmp_path, "--skip-spark"), env=demo_environ(tmp_path, 120), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    logs = tmp_path / "demo" / "logs"
    try:
        wait_for(lambda: len(list(logs.glob("*.log"))) >= 3 and all(
            "INITIALIZING -> PROCESSING" in p.read_text(errors="replace") for p in logs.glob("*.log")), 120,
            "three workers processing")  # fmt: skip
        pids = {int(m) for p in logs.glob("*.log") for m in re.findall(r"@[^:]+:(\d+):", p.read_text())}
        assert len(pids) >= 3, pids
        demo.send_signal(signal.SIGTERM)
        output, _ = demo.communicate(timeout=90)
    finally:
        demo.kill()
    assert demo.returncode != 0 and "interrupted: every process the demo started has been stopped" in output
    time.sleep(1)
    alive = [pid for pid in pids if _alive(pid)]
    assert not alive, f"workers left running after the demo's SIGTERM: {alive}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"

"""Tumbling windows end to end: a windowed counter's totals equal the writes of each window, across
a SIGKILL of its worker in the middle of a window (the next owner resumes the state saved with the
checkpoint, not an empty window).

One ``consumer run`` process counts one shard's changes in windows of 3 s (examples.windowed_counter);
it is SIGKILLed 1.5 s into a window that already has checkpointed records, a second worker takes the
lease over after the failover time, and every window's final count is compared with the records the
stream holds for it (read back from the emulator by creation time, the window's clock).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from emulator.testing import RunningEmulator, running_emulator
from ground.settings import load_settings
from tests.e2e.fast_settings import FAST_WORKER_YAML
from tools.demo.fleet import LocalFleet
from tools.local_aws import create_local_tables

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
WINDOW = 3


def write_config(directory: Path, endpoint: str, output: Path) -> None:
    (directory / "windows.yaml").write_text(
        f"""
application_name: e2e-windows
region: us-east-1
endpoint_url: {endpoint}
table:
  name: orders
  partition_key: {{name: pk, type: S}}
{FAST_WORKER_YAML}
  call_process_records_even_for_empty_record_list: true
metrics:
  destination: none
logs:
  retention_days: 1
processing:
  processor: examples.windowed_counter:WindowedCounter
  options: {{output: {output}}}
  tumbling_window_seconds: {WINDOW}
  batching: {{batch_size: 10}}
"""
    )


def stream_windows(emu: RunningEmulator) -> Counter[float]:
    """Records per window, read back from the stream (every shard, from TRIM_HORIZON)."""
    ddb, streams = emu.client("dynamodb"), emu.client("dynamodbstreams")
    arn = ddb.describe_table(TableName="orders")["Table"]["LatestStreamArn"]
    counts: Counter[float] = Counter()
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            for r in page["Records"]:
                created = r["dynamodb"]["ApproximateCreationDateTime"].timestamp()
                counts[float(int(created // WINDOW) * WINDOW)] += 1
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    return counts


def finals(output: Path) -> dict[float, int]:
    found: Counter[float] = Counter()
    for path in output.rglob("*.json"):
        final: dict[str, Any] = json.loads(path.read_text())
        found[float(final["windowStart"])] += int(final["records"])
    return dict(found)


def test_window_totals_equal_the_writes_across_a_sigkill_mid_window(tmp_path: Path) -> None:
    config, output = tmp_path / "config", tmp_path / "windows"
    config.mkdir()
    environ = {
        "PYTHONPATH": str(REPO),
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    with running_emulator(partitions=1, rollover_seconds=3600, seed=3) as emu:
        write_config(config, emu.endpoint, output)
        settings = load_settings("windows", config)
        create_local_tables(settings, emu.client("dynamodb"))
        ddb = emu.client("dynamodb")
        written = 0

        def write_for(seconds: float) -> None:
            nonlocal written
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                ddb.put_item(
                    TableName="orders", Item={"pk": {"S": f"item-{written % 17}"}, "n": {"N": str(written)}}
                )
                written += 1
                time.sleep(0.05)

        with LocalFleet("windows", config, tmp_path / "logs", environ) as fleet:
            fleet.start_worker()
            write_for(4.0)  # the worker starts and counts (windows close as records of the next arrive)
            # SIGKILL 1.5 s into a window: its first records are checkpointed with their state.
            wait = (1.5 - time.time() % WINDOW) % WINDOW
            write_for(wait if wait >= 0.3 else wait + WINDOW)
            killed_in = float(int(time.time() // WINDOW) * WINDOW)
            fleet.kill("worker-1")
            fleet.start_worker()
            write_for(5.0)  # during the failover: the next owner reads them after taking the lease
            expected = stream_windows(emu)
            assert sum(expected.values()) == written
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and finals(output) != dict(expected):
                time.sleep(0.5)
            got = finals(output)
            log = (tmp_path / "logs").glob("worker-2*")
            resumed = any("no window state saved" in p.read_text(errors="replace") for p in log)
    assert killed_in in expected and expected[killed_in] > 0
    assert got == dict(expected), f"windows {got} != writes {dict(expected)}"
    assert not resumed  # the second owner found the state saved with the checkpoint it took over

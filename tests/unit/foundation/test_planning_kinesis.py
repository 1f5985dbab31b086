"""`consumer plan` for a Kinesis source, against figures worked out by hand: N is the stream's shard
count, a shard takes 1000 records/s or 1 MB/s of writes, and every consumer shares its 5 GetRecords
calls/s and 2 MB/s of reads."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ground.settings import load_settings
from infra.leases_table import capacity_bounds
from tools.planning import make_plan
from tools.planning.figures import Plan

BASE = """
application_name: plan-test
table:
  name: orders
  partition_key: {name: pk}
"""

# 8 shards, 6000 records/s of 0.5 KB: 3000 KB/s; two other applications poll the stream too.
STREAM = """
source:
  kind: kinesis
  stream_name: clicks
  shard_count: 8
  peak_records_per_second: 6000
  average_record_kb: 0.5
  other_consumers: 2
fleet:
  desired_instances: 2
  worker_processes_per_instance: 2
"""


def _plan(tmp_path: Path, env_text: str) -> Plan:
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "test.yaml").write_text(env_text)
    return make_plan(load_settings("test", tmp_path, environ={}))


def test_a_stream_is_sized_from_its_shards_and_throughput(tmp_path: Path) -> None:
    plan = _plan(tmp_path, STREAM)
    expected = {
        "partitions_N": 8,  # source.shard_count
        "stream_write_kb_per_second": 3000,  # 6000 x 0.5
        "shards_needed_for_writes": 6,  # max(ceil(6000/1000) = 6, ceil(3000/1024) = 3)
        "stream_consumers": 3,  # this fleet + 2
        "get_records_per_shard_share": 5 / 3,
        "get_records_per_shard": 1,  # 1000 / idle_time_between_reads_millis 1000
        "get_records_per_shard_catching_up": 5,  # 1000 / min_time_between_reads_millis 200
        "stream_write_kb_per_shard": 375,  # 3000 / 8
        "catch_up_kb_per_second_per_shard": 2048 / 3 - 375,  # 307.7 KB/s left to gain on the tip
        "shards_max": 16,  # 2N: a resharding's parents beside their children, no rollovers
        "worker_processes_M": 4,
        "leases_per_worker_peak": 4,  # ceil(2N / M) = ceil(16/4)
        "max_leases_for_worker_max": 4,
        # max(1, ceil(16 / (500 x 2)) = 1, ceil(6000 / (5000 x 2)) = 1)
        "recommended_instances": 1,
        # 10 000 records a read (Kinesis' most: max_records unset) x 0.5 KB (source.average_record_kb,
        # no images) x 4 leases x 2 / 1024
        "memory_per_worker": 10_000 * 0.5 * 4 * 2 / 1024,
        # heartbeats 4 / 3.308 s + checkpoints 8 shards / 1 s
        "lease_table_write_units": 4 / 3.308 + 8,
        "scale_out_threshold": 16,  # 2N
    }
    for name, value in expected.items():
        assert plan.value(name) == pytest.approx(value, rel=1e-6), name
    assert not plan.warnings
    # Catching up, 5 reads/s is above this fleet's share of 5/3: said, not warned (nothing is lost).
    assert any("above its share of 1.66667 GetRecords/s" in note for note in plan.notes)
    # Sized from source:, not from table: (which a Kinesis source does not read).
    inputs = dict(plan.inputs)
    assert inputs["source.shard_count"] == "8" and inputs["source.other_consumers"] == "2"
    assert not any(key.startswith("table.") for key in inputs)
    assert "table_write_units" not in {f.name for f in plan.figures}


def test_too_few_shards_for_the_writes_is_a_warning_and_on_demand_a_note(tmp_path: Path) -> None:
    few = STREAM.replace("shard_count: 8", "shard_count: 4")
    warned = _plan(tmp_path, few)
    assert any("need 6 shards but the stream has source.shard_count = 4" in w for w in warned.warnings), (
        warned.warnings
    )
    on_demand = few.replace(
        "stream_name: clicks", "stream_name: clicks\n  create: true\n  stream_mode: ON_DEMAND"
    )
    noted = _plan(tmp_path, on_demand)
    assert not noted.warnings  # and its 6 shards carry 500 KB/s each: 3 readers stay under 2 MB/s
    assert noted.value("stream_write_kb_per_shard") == 500
    assert any("adds shards itself, so N grows to about 6" in n for n in noted.notes)


def test_polling_faster_than_the_shared_read_calls_is_a_warning(tmp_path: Path) -> None:
    # 5 consumers share 5 calls/s: 1 each; polling every 500 ms asks 2.
    busy = (
        STREAM.replace("other_consumers: 2", "other_consumers: 4")
        + "worker:\n  idle_time_between_reads_millis: 500\n"
    )
    plan = _plan(tmp_path, busy)
    assert plan.value("get_records_per_shard") == 2
    assert plan.value("get_records_per_shard_share") == 1
    (warning,) = [w for w in plan.warnings if "GetRecords" in w]
    assert "raise worker.idle_time_between_reads_millis to 1000" in warning


def test_consumers_reading_more_than_2_mb_per_shard_is_a_warning(tmp_path: Path) -> None:
    # 8 shards x 1 MB/s written each (8192 KB/s) read by 3 consumers: 3 MB/s per shard > 2 MB/s.
    full = STREAM.replace("peak_records_per_second: 6000", "peak_records_per_second: 8000").replace(
        "average_record_kb: 0.5", "average_record_kb: 1.024"
    )
    plan = _plan(tmp_path, full)
    assert plan.value("catch_up_kb_per_second_per_shard") == pytest.approx(2048 / 3 - 1024)
    assert any("need more than its 2 MB/s of reads" in w for w in plan.warnings), plan.warnings


def test_a_provisioned_leases_table_is_sized_from_the_streams_shards(tmp_path: Path) -> None:
    """The CDK stack's leases-table write ceiling: the plan's catch-up writes with the fleet at its
    maximum, plus a resharding's burst of 2N (a child's lease and a parent's last checkpoint per
    shard) with N the stream's 40 shards, not table:'s one partition, at 70 % utilization."""
    (tmp_path / "base.yaml").write_text(BASE)
    text = (
        STREAM.replace("shard_count: 8", "shard_count: 40")
        + "worker:\n  lease_table_billing_mode: PROVISIONED\n"
    )
    (tmp_path / "test.yaml").write_text(text)
    settings = load_settings("test", tmp_path, environ={})
    at_max = settings.model_copy(
        update={
            "fleet": settings.fleet.model_copy(update={"desired_instances": settings.fleet.max_instances})
        }
    )
    catching_up = make_plan(at_max).value("lease_table_write_units_catching_up")
    bounds = capacity_bounds(settings)
    assert bounds is not None
    assert bounds.write_ceiling == math.ceil((catching_up + 2 * 40) / 0.7)

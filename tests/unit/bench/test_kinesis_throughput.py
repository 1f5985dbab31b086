"""The pure pieces of bench/kinesis_throughput.py: the records it loads, the rate it reads off the
batches, and the floor's file."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.fresh_orjson import read_bodies
from bench.kinesis_floor import write_records
from bench.kinesis_throughput import RECORD_BYTES, partition_key, record_data, record_json, window_rate


@pytest.mark.parametrize("index", [0, 7, 12_345, 9_999_999])
def test_a_record_is_1_kib_as_kinesis_counts_it_and_valid_json(index: int) -> None:
    data = record_data(index)
    assert len(data) + len(partition_key(index)) == RECORD_BYTES
    assert orjson.loads(data)["order_id"] == f"o-{index:09d}"


def test_a_size_too_small_for_the_document_is_refused() -> None:
    with pytest.raises(ValueError, match="too small"):
        record_json(1, 50)


def test_the_rate_runs_from_the_first_to_the_last_batch_inside_the_window() -> None:
    batches = [(0.5, 1000), (1.0, 1000), (1.5, 1000), (2.0, 1000), (3.5, 1000)]
    # Inside [0.9, 3.0]: batches at 1.0, 1.5, 2.0; the first marks the start.
    assert window_rate(batches, 0.9, 3.0) == (2000 / 1.0, 2000)


def test_a_window_with_fewer_than_two_batches_is_not_measured() -> None:
    with pytest.raises(RuntimeError, match="fewer than two"):
        window_rate([(1.0, 1000), (5.0, 1000)], 0.5, 2.0)


def test_the_floor_file_reads_back_record_by_record(tmp_path: Path) -> None:
    records = [record_data(i) for i in range(3)]
    path = str(tmp_path / "records.bin")
    write_records(records, path)
    assert read_bodies(path) == (records, 3)

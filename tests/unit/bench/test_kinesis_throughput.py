"""The pure pieces of bench/kinesis_throughput.py: the records it loads, the reads and the rate it
reads off the batches, and the floor's file."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.fresh_orjson import read_bodies
from bench.kinesis_floor import write_records
from bench.kinesis_throughput import (
    RECORD_BYTES,
    partition_key,
    reads,
    record_data,
    record_json,
    window_rate,
)


@pytest.mark.parametrize("index", [0, 7, 12_345, 9_999_999])
def test_a_record_is_1_kib_as_kinesis_counts_it_and_valid_json(index: int) -> None:
    data = record_data(index)
    assert len(data) + len(partition_key(index)) == RECORD_BYTES
    assert orjson.loads(data)["order_id"] == f"o-{index:09d}"


def test_a_size_too_small_for_the_document_is_refused() -> None:
    with pytest.raises(ValueError, match="too small"):
        record_json(1, 50)


def test_batches_a_few_milliseconds_apart_are_one_read() -> None:
    one_read = [(10.0 + i * 0.004, 1000) for i in range(10)]  # 10 000 records handed on 1000 at a time
    assert reads([*one_read, (14.9, 1000), (14.905, 500)]) == [(10.0, 10_000), (14.9, 1500)]


def test_the_rate_counts_whole_read_cycles_inside_the_window() -> None:
    # Reads of 10 000 records every 5 s, each handed on in ten batches; the window cuts the first
    # one and ends inside the fourth's batches: the reads starting at 5, 10 and 15 s count, the
    # last one only as the end of the cycle before it.
    batches = [(start + i * 0.004, 1000) for start in (0.0, 5.0, 10.0, 15.0, 20.0) for i in range(10)]
    assert window_rate(batches, 0.02, 15.01) == (20_000 / 10.0, 2)


def test_a_window_with_fewer_than_three_reads_is_not_measured() -> None:
    with pytest.raises(RuntimeError, match="too few"):
        window_rate([(1.0, 1000), (1.5, 1000), (5.0, 1000)], 0.5, 2.0)


def test_the_floor_file_reads_back_record_by_record(tmp_path: Path) -> None:
    records = [record_data(i) for i in range(3)]
    path = str(tmp_path / "records.bin")
    write_records(records, path)
    assert read_bodies(path) == (records, 3)

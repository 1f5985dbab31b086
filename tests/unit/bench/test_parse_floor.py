"""The parse benchmark (bench/parse_floor.py) runs and reports every contender (its numbers are for
people, not assertions)."""

from __future__ import annotations

import json

import pytest

from bench import parse_floor
from consumer.records import StreamRecord
from consumer.streams.wire import parse_get_records


def test_sample_body_is_a_valid_get_records_response() -> None:
    body = parse_floor.sample_body(5)
    result = parse_get_records(body, "s", 0)
    assert len(result.records) == 5 and all(isinstance(r, StreamRecord) for r in result.records)
    assert result.records[0].new_image is not None and result.records[0].new_image["blob"] == bytes(range(10))
    assert json.loads(body)["NextShardIterator"] == "next"


def test_bench_prints_a_ratio_for_every_contender(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_floor.main(["--records", "20", "--batches", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line[:42].strip(): line[42:].split() for line in lines[2:]}
    assert set(rows) == {
        "orjson.loads (floor)",
        "json.loads",
        "fast path: parse_get_records",
        "fast path + seq/eventName per record",
        "fast path + Python values of all images",
        "boto3: botocore parser",
        "boto3: parser + TypeDeserializer",
    }
    assert rows["orjson.loads (floor)"][1] == "1.00"
    assert all(float(micros) > 0 and float(ratio) > 0 for micros, ratio in rows.values())

"""Key ranges (pipeline/ranges.py): every key has one bucket, bounds split a sample evenly, and the
property round-trips (binary keys included)."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ground.settings import KeyAttribute
from pipeline.errors import BadChangeLogError, SnapshotStoreError
from pipeline.ranges import KeyRanges, choose, sample_keys
from pipeline.schemas import KeySchema

KEYS = KeySchema((KeyAttribute(name="pk", type="S"), KeyAttribute(name="sk", type="S")))
keys = st.tuples(st.text(max_size=6), st.text(max_size=3))


@settings(max_examples=80, deadline=None)
@given(sample=st.lists(keys, max_size=60), probes=st.lists(keys, max_size=30), buckets=st.integers(1, 9))
def test_buckets_are_ordered_ranges_of_keys(
    sample: list[tuple[str, str]], probes: list[tuple[str, str]], buckets: int
) -> None:
    chosen = choose(sample, buckets)
    if not sample:
        assert chosen is None
        return
    assert chosen is not None and chosen.buckets <= buckets
    assert list(chosen.bounds) == sorted(set(chosen.bounds))
    ordered = sorted(set(sample) | set(probes))
    found = [chosen.bucket_of(key) for key in ordered]
    assert found == sorted(found)  # a larger key never lands in a lower bucket
    assert all(0 <= b < chosen.buckets for b in found)
    for bucket, bound in enumerate(chosen.bounds, start=1):
        assert chosen.bucket_of(bound) == bucket  # a bound opens its bucket


def test_a_sample_is_split_evenly() -> None:
    sample = [(f"customer-{i:04d}", "order") for i in range(1000)]
    chosen = choose(sample, 4)
    assert chosen is not None
    sizes = [sum(1 for key in sample if chosen.bucket_of(key) == b) for b in range(4)]
    assert sizes == [250, 250, 250, 250]


def test_fewer_distinct_keys_than_buckets_give_one_bucket_each() -> None:
    chosen = choose([("b", "1"), ("a", "1"), ("b", "1")], 16)
    assert chosen == KeyRanges((("b", "1"),))


def test_the_property_round_trips_and_refuses_what_is_not_bounds() -> None:
    binary = KeySchema((KeyAttribute(name="id", type="B"),))
    ranges = KeyRanges(((b"\x00\xff",), (b"\x01",)))
    assert KeyRanges.from_json(ranges.to_json(), binary) == ranges
    text = KeyRanges((("a", "x"), ("b", "y")))
    assert KeyRanges.from_json(text.to_json(), KEYS) == text
    with pytest.raises(SnapshotStoreError, match="bounds of the key attributes"):
        KeyRanges.from_json('[["a"]]', KEYS)  # one value for a two-attribute key
    with pytest.raises(SnapshotStoreError, match="out of order"):
        KeyRanges.from_json('[["b", "x"], ["a", "x"]]', KEYS)


def test_the_sample_reads_keys_from_objects_spread_over_the_listing(tmp_path: Path) -> None:
    """The first lines of up to eight objects, every shard's among them; binary keys decoded; lines
    that are no change skipped; an object that is not gzip named."""
    uris = []
    for shard in range(16):
        path = tmp_path / f"shard-{shard:02d}.jsonl.gz"
        lines = [
            json.dumps({"keys": {"id": {"B": base64.b64encode(bytes([shard, i])).decode()}}})
            for i in range(3)
        ]
        path.write_bytes(gzip.compress("\n".join([*lines, "not json", '{"v": 1}']).encode()))
        uris.append(str(path))
    binary = KeySchema((KeyAttribute(name="id", type="B"),))
    found = sample_keys(uris, binary)
    assert sorted(found) == sorted((bytes([shard, i]),) for shard in range(0, 16, 2) for i in range(3))
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00 not gzip at all")
    with pytest.raises(BadChangeLogError, match="broken.jsonl.gz"):
        sample_keys([str(broken)], binary)

"""The runs' per-line work compiles to methods small enough for the JVM's JIT compiler.

HotSpot does not compile a method of more than 8 000 bytes of bytecode (``-XX:+DontCompileHugeMethods``,
the default): it runs in the bytecode interpreter for good. Spark generates one method per
whole-stage pipeline, so all a stage does to each line (parse, validate, bucket) can land in one
method, and every line of the change log then pays the interpreter (a full rebuild of the bench's
million changes took about 1.6 times the CPU). The suite runs with whole-stage code generation off
(it saves compile time on small data); these tests turn it on for the plans the runs build.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from pipeline import incremental_run, parse, snapshot
from pipeline.run_plan import with_bucket
from pipeline.snapshot_run import run_snapshot
from tests.pipeline.fixtures import change, settings_for, write_object

pytestmark = pytest.mark.spark

HUGE_METHOD_BYTES = 8_000  # HotSpot's HugeMethodLimit


def largest_methods(frame: DataFrame) -> list[int]:
    """The largest generated method of each whole-stage subtree of ``frame``'s plan, in bytes."""
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        frame.explain("codegen")
    sizes = [int(size) for size in re.findall(r"maxMethodCodeSize:(\d+)", shown.getvalue())]
    assert sizes, shown.getvalue()[:2000]
    return sizes


@pytest.fixture
def whole_stage(spark: SparkSession) -> Iterator[None]:
    """Code generation as the product's jobs have it (whole-stage on, expressions generated with the
    interpreted fallback: Spark's default, which the session fixture turns off), adaptive execution
    off (so that explain shows every stage)."""
    keys = ("spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode", "spark.sql.adaptive.enabled")
    saved = {key: spark.conf.get(key) for key in keys}
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    spark.conf.set("spark.sql.codegen.factoryMode", "FALLBACK")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        yield
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)


def _changes(shard: str, first: int, keys: range, event: str) -> list[dict[str, Any]]:
    image = {"amount": {"N": "12.5"}, "status": {"S": "paid"}, "tags": {"SS": ["a"]}, "n": {"NS": ["1"]}}
    return [change(shard, first + i, event, f"customer-{key:04d}", image=image) for i, key in enumerate(keys)]


def test_a_rebuild_and_an_incremental_parse_generate_methods_the_jit_compiles(
    spark: SparkSession, tmp_path: Path, whole_stage: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan a full rebuild into 16 key ranges writes (parse, validation, bucket, merge, write),
    and an incremental run's parse (typed images) and bucket: no generated method over the limit."""
    settings = settings_for(tmp_path)
    log = tmp_path / "changelog"
    write_object(log, _changes("shardId-1", 1, range(0, 64), "INSERT"))
    seen: dict[str, list[int]] = {}
    write_parts = snapshot.write_parts

    def measured_write(rows: DataFrame, uri: str, keys: Any) -> None:
        seen.setdefault("rebuild", []).extend(largest_methods(rows))
        write_parts(rows, uri, keys)

    def measured_parse(raw: DataFrame, keys: Any, **form: Any) -> DataFrame:
        parsed = parse_lines(raw, keys, **form)
        seen.setdefault("parse", []).extend(largest_methods(parsed))
        return parsed

    def measured_bucket(frame: DataFrame, keys: Any, layout: Any) -> DataFrame:
        bucketed = with_bucket(frame, keys, layout)
        seen.setdefault("incremental bucket", []).extend(largest_methods(bucketed))
        return bucketed

    parse_lines = parse.parse_lines
    monkeypatch.setattr(snapshot, "write_parts", measured_write)
    monkeypatch.setattr(parse, "parse_lines", measured_parse)
    monkeypatch.setattr(incremental_run, "with_bucket", measured_bucket)
    built = run_snapshot(spark, settings, full=True, buckets=16)
    assert built.items == 64 and built.bad_lines == 0 and seen["rebuild"]
    write_object(log, _changes("shardId-1", 100, range(32, 96), "MODIFY"))
    assert run_snapshot(spark, settings).new_changes == 64 and seen["incremental bucket"]
    for plan, sizes in seen.items():
        assert max(sizes) < HUGE_METHOD_BYTES, (plan, sizes)

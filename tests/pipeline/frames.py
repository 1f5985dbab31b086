"""Two Spark DataFrames hold the same rows (in any order) under the same column names and types.

Written here rather than taken from ``pyspark.testing``: that package imports ``pyspark.pandas``
(PySpark 3.5 as soon as it is imported, 4.x whenever pyarrow is importable), which fails to import
with pandas 3, the version the pipeline's environment pins; the pipeline tests run on both
PySpark 4 and EMR's 3.5. Nullability is not compared (a written file and a frame built in the test
may disagree on it for the same data).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Row


def _canonical(value: Any) -> Any:
    """Rows, maps and arrays as nested tuples: comparable and sortable by their text."""
    if isinstance(value, Row):
        value = value.asDict(recursive=True)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    return value


def assert_frames_equal(actual: DataFrame, expected: DataFrame, **_: Any) -> None:
    columns = [(f.name, f.dataType.simpleString()) for f in actual.schema.fields]
    wanted = [(f.name, f.dataType.simpleString()) for f in expected.schema.fields]
    assert columns == wanted, f"columns differ:\n  actual   {columns}\n  expected {wanted}"
    have = sorted((_canonical(r) for r in actual.collect()), key=repr)
    need = sorted((_canonical(r) for r in expected.collect()), key=repr)
    missing = [r for r in need if r not in have]
    extra = [r for r in have if r not in need]
    assert have == need, (
        f"rows differ: {len(missing)} expected row(s) missing {missing[:3]}, {len(extra)} extra {extra[:3]}"
    )

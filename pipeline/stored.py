"""What the snapshot tables store: their columns (in Spark's types and in Arrow's), the bucket
column, and one live data file as a run plans it.

Spark writes the runs' files and PyArrow reads and rewrites them on the driver (:mod:`pipeline.locate`,
:mod:`pipeline.rewrite`, :mod:`pipeline.maintenance`): both sides must agree on every column, so the
Arrow schema is derived from the Spark one here, once.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline.errors import SnapshotStoreError
from pipeline.schemas import KeySchema, snapshot_schema

BUCKET = "_bucket"  # the partition a row belongs to: its key's range (pipeline/ranges.py)


def stored_schema(keys: KeySchema) -> T.StructType:
    """The Spark schema of both tables' rows: a snapshot row plus its bucket."""
    return T.StructType(
        [*snapshot_schema(keys).fields, T.StructField(BUCKET, T.IntegerType(), nullable=False)]
    )


def arrow_type(kind: T.DataType) -> pa.DataType:
    """Spark type → Arrow type (the types the snapshot uses)."""
    if isinstance(kind, T.StringType):
        return pa.string()
    if isinstance(kind, T.BinaryType):
        return pa.binary()
    if isinstance(kind, T.DoubleType):
        return pa.float64()
    if isinstance(kind, T.IntegerType):
        return pa.int32()
    if isinstance(kind, T.LongType):
        return pa.int64()
    if isinstance(kind, T.BooleanType):
        return pa.bool_()
    if isinstance(kind, T.ArrayType):
        return pa.list_(arrow_type(kind.elementType))
    if isinstance(kind, T.MapType):
        return pa.map_(arrow_type(kind.keyType), arrow_type(kind.valueType))
    if isinstance(kind, T.StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType), nullable=True) for f in kind.fields])
    raise SnapshotStoreError(f"no Arrow type for {kind}")


def arrow_schema(schema: T.StructType) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.dataType), nullable=True) for f in schema.fields])


def _shape(kind: pa.DataType) -> str:
    """A type's text without what Iceberg and Arrow may spell differently for the same column:
    nullability, field ids, and large against regular strings, binaries and lists."""
    if pa.types.is_struct(kind):
        return "struct<" + ", ".join(f"{f.name}: {_shape(f.type)}" for f in kind) + ">"
    if pa.types.is_map(kind):
        return f"map<{_shape(kind.key_type)}, {_shape(kind.item_type)}>"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return f"list<{_shape(kind.value_type)}>"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "binary"
    return str(kind)


def schema_difference(found: pa.Schema, wanted: pa.Schema) -> str | None:
    """How a table's columns (``found``) differ from the ones this code writes, or None if alike."""
    have = [f"{f.name}: {_shape(f.type)}" for f in found]
    need = [f"{f.name}: {_shape(f.type)}" for f in wanted]
    if have == need:
        return None
    extra = [c for c in have if c not in need]
    missing = [c for c in need if c not in have]
    parts = [f"has {', '.join(extra)}"] if extra else []
    parts += [f"lacks {', '.join(missing)}"] if missing else []
    return "; ".join(parts) or "has the same columns in another order"


@dataclass(frozen=True, order=True)
class FileTask:
    """One live data file of a table and the position delete files (path, rows) that apply to it."""

    path: str
    bucket: int
    rows: int
    deletes: tuple[tuple[str, int], ...] = ()

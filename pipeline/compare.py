"""Snapshot vs live table: typed comparison of items.

Both sides are turned into :data:`pipeline.schemas.ITEM` maps and then into one canonical text per
item, in which numbers are compared as numbers (``1.50`` == ``1.5``), sets regardless of order,
binary as bytes and nested maps regardless of key order. :func:`compare` is a pure transform;
scanning the table is :mod:`pipeline.table_scan`'s job.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from pipeline.schemas import ITEM, ITEM_COLUMN, VERIFY_RESULT, WIRE_ATTRIBUTE, KeySchema

STATUSES = ("match", "missing", "extra", "stale")


def _number(text: str) -> str:
    try:
        return str(Decimal(text).normalize())
    except InvalidOperation:
        return f"?{text}"


def _binary(value: bytes | bytearray | str) -> str:
    if isinstance(value, str):  # base64 text, as in attribute-value JSON
        value = base64.b64decode(value)
    return base64.b64encode(bytes(value)).decode("ascii")


def _canonical_wire(value: Mapping[str, Any]) -> Any:
    """Canonical form of one attribute value in wire (attribute-value JSON) form."""
    ((kind, raw),) = value.items()
    if kind == "N":
        return ["N", _number(raw)]
    if kind == "B":
        return ["B", _binary(raw)]
    if kind == "SS":
        return ["SS", sorted(raw)]
    if kind == "NS":
        return ["NS", sorted(_number(n) for n in raw)]
    if kind == "BS":
        return ["BS", sorted(_binary(b) for b in raw)]
    if kind == "M":
        return ["M", {name: _canonical_wire(v) for name, v in sorted(raw.items())}]
    if kind == "L":
        return ["L", [_canonical_wire(v) for v in raw]]
    if kind == "NULL":
        return ["NULL"]
    return [kind, raw]


# The stored attribute's fields (pipeline.schemas.ATTRIBUTE: the wire's, in lower case), each with
# its DynamoDB type.
_TYPE_OF_FIELD = {f.name.lower(): f.name for f in WIRE_ATTRIBUTE.fields}


def _canonical_attribute(attribute: Mapping[str, Any]) -> Any:
    """Canonical form of one :data:`ATTRIBUTE` struct (a Row or a dict): its one field that is set."""
    for field, kind in _TYPE_OF_FIELD.items():
        value = attribute[field]
        if value is None:
            continue
        if kind in ("M", "L"):
            return _canonical_wire({kind: json.loads(value)})
        return _canonical_wire({kind: value})
    return ["?"]  # no field set: never written by the pipeline (such lines are rejected)


def canonical_item(item: Mapping[str, Any] | None) -> str | None:
    """One text per item value: equal texts ⇔ equal DynamoDB items."""
    if item is None:
        return None
    return json.dumps({name: _canonical_attribute(item[name]) for name in sorted(item)}, sort_keys=True)


# A plain row-at-a-time UDF, said explicitly: left to infer, PySpark tries (and fails) to read a
# pandas UDF type out of the hints, warning twice per process (driver and every Python worker).
_canonical_udf = F.udf(canonical_item, T.StringType(), useArrow=False)


def _wire_json(value: Any) -> Any:
    """boto3 low-level values → attribute-value JSON (binary back to base64)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {k: _wire_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire_json(v) for v in value]
    return value


def attribute_from_wire(value: Mapping[str, Any]) -> dict[str, Any]:
    """An attribute value as the low-level client returns it → the :data:`ATTRIBUTE` struct."""
    ((kind, raw),) = value.items()
    row: dict[str, Any] = dict.fromkeys(_TYPE_OF_FIELD)
    if kind in ("M", "L"):
        raw = json.dumps(_wire_json(raw), separators=(",", ":"))
    elif kind == "B":
        raw = bytes(raw) if isinstance(raw, bytes | bytearray) else base64.b64decode(raw)
    elif kind == "BS":
        raw = [bytes(b) if isinstance(b, bytes | bytearray) else base64.b64decode(b) for b in raw]
    row[kind.lower()] = raw
    return row


def table_row(item: Mapping[str, Mapping[str, Any]], keys: KeySchema) -> dict[str, Any]:
    """A scanned item → a row of :func:`table_schema` (key columns + the typed item)."""
    row: dict[str, Any] = {}
    for attribute in keys.attributes:
        value = item[attribute.name][attribute.type]
        row[attribute.name] = bytes(value) if attribute.type == "B" else value
    row[ITEM_COLUMN] = {name: attribute_from_wire(value) for name, value in item.items()}
    return row


def table_schema(keys: KeySchema) -> T.StructType:
    return T.StructType([*keys.fields(), T.StructField(ITEM_COLUMN, ITEM)])


def compare(snapshot: DataFrame, table: DataFrame, keys: KeySchema) -> DataFrame:
    """:data:`VERIFY_RESULT`, one row per key on either side.

    match: same item on both sides; missing: in the table, not in the snapshot; extra: in the
    snapshot, not in the table; stale: on both sides with different values.
    """
    left = snapshot.select(*keys.names, _canonical_udf(F.col(ITEM_COLUMN)).alias("_snap"))
    right = table.select(*keys.names, _canonical_udf(F.col(ITEM_COLUMN)).alias("_table"))
    joined = left.join(right, keys.names, "full_outer")
    status = (
        F.when(F.col("_snap").isNull(), F.lit("missing"))
        .when(F.col("_table").isNull(), F.lit("extra"))
        .when(F.col("_snap") == F.col("_table"), F.lit("match"))
        .otherwise(F.lit("stale"))
    )
    key_text = F.to_json(F.struct(*[_printable(a.name, a.type) for a in keys.attributes]))
    result = joined.select(status.alias("status"), key_text.alias("key"))
    return result.select(*VERIFY_RESULT.fieldNames())


def _printable(name: str, kind: str) -> Any:
    return F.base64(F.col(name)).alias(name) if kind == "B" else F.col(name)

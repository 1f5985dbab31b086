"""Explicit schemas at every boundary of the pipeline.

DynamoDB attribute values keep their types in Spark through one struct, :data:`ATTRIBUTE`, shaped
like DynamoDB JSON itself (the wire, and DynamoDB's exports to S3): one field per DynamoDB type
(``s n b bool null ss ns bs m l``, the type keys in lower case), exactly one of them set:

* ``n`` / ``ns`` keep numbers as the exact decimal text DynamoDB sent (up to 38 significant digits,
  more than a Spark ``DecimalType`` can hold for every scale),
* ``b`` / ``bs`` are real binary, decoded from the wire's base64,
* ``ss`` / ``ns`` / ``bs`` are arrays that their field marks as sets, ``null`` is true for NULL,
* ``M`` and ``L`` values are nested and Spark schemas cannot recurse, so ``m`` / ``l`` keep them as
  attribute-value JSON (``{"a": {"N": "1"}}`` / ``[{"S": "x"}]``): lossless, and still typed inside.

Because the stored struct has the wire's fields in the wire's order, typing a parsed image is a
compiled ``cast`` (it renames the fields), not a function per attribute: as cheap as it can be.

Items are ``map<attribute name, ATTRIBUTE>``. Key attributes are also plain columns named after the
attribute (S and N → string, B → binary), so a snapshot is queried by key without unpacking the map.
Bookkeeping columns start with ``_`` so that they cannot collide with a key attribute's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T  # noqa: N812  (the PySpark idiom)

from ground.settings import KeyAttribute, TableSettings
from pipeline.errors import PipelineError

# One attribute value as it is on the wire: the JSON reader fills the field named by its type key;
# M and L stay raw JSON text because a Spark schema cannot describe a recursive value.
WIRE_ATTRIBUTE = T.StructType(
    [
        T.StructField("S", T.StringType()),
        T.StructField("N", T.StringType()),
        T.StructField("B", T.BinaryType()),
        T.StructField("BOOL", T.BooleanType()),
        T.StructField("NULL", T.BooleanType()),
        T.StructField("SS", T.ArrayType(T.StringType())),
        T.StructField("NS", T.ArrayType(T.StringType())),
        T.StructField("BS", T.ArrayType(T.BinaryType())),
        T.StructField("M", T.StringType()),
        T.StructField("L", T.StringType()),
    ]
)
WIRE_ITEM = T.MapType(T.StringType(), WIRE_ATTRIBUTE)

# The stored attribute: the wire's fields, in its order, named in lower case (what table readers
# expect of column names; Glue and Athena fold names to lower case).
ATTRIBUTE = T.StructType([T.StructField(f.name.lower(), f.dataType) for f in WIRE_ATTRIBUTE.fields])
ITEM = T.MapType(T.StringType(), ATTRIBUTE)

# One line of the change log (docs/design.md, "Change log"), the fields the pipeline uses; the
# others (oldImage, userIdentity, table, parentShardIds, eventId, sizeBytes) are skipped by the
# parser, not built into values, which keeps parsing cheap.
CHANGELOG_LINE = T.StructType(
    [
        T.StructField("v", T.LongType()),
        T.StructField("shardId", T.StringType()),
        T.StructField("eventName", T.StringType()),
        T.StructField("sequenceNumber", T.StringType()),
        T.StructField("approximateCreationDateTime", T.DoubleType()),
        T.StructField("keys", WIRE_ITEM),
        T.StructField("newImage", WIRE_ITEM),
        T.StructField("landedAt", T.DoubleType()),
    ]
)

# Lines as the entry point reads them: the text, the object it came from, and a position that
# increases by one per line within an object (line number = position - first position + 1). Positions
# rather than line numbers keep the common path free of a per-object window over every line.
RAW_LINES = T.StructType(
    [
        T.StructField("value", T.StringType()),
        T.StructField("file", T.StringType(), nullable=False),
        T.StructField("position", T.LongType(), nullable=False),
    ]
)

BAD_LINES = T.StructType(
    [
        T.StructField("file", T.StringType(), nullable=False),
        T.StructField("line", T.LongType(), nullable=False),
        T.StructField("problem", T.StringType(), nullable=False),
        T.StructField("text", T.StringType()),
    ]
)

# Bookkeeping columns of changes and snapshot rows.
SHARD_ID = "_shard_id"
SEQUENCE = "_sequence_number"  # 40 digits, zero-padded: string order == integer order
EVENT = "_event_name"
CREATED = "_approximate_creation_time"  # epoch seconds
LANDED = "_landed_at"  # epoch seconds
ITEM_COLUMN = "_item"
RESERVED = frozenset({SHARD_ID, SEQUENCE, EVENT, CREATED, LANDED, ITEM_COLUMN})
SEQUENCE_DIGITS = 40

_KEY_SPARK_TYPES: dict[str, T.DataType] = {"S": T.StringType(), "N": T.StringType(), "B": T.BinaryType()}


@dataclass(frozen=True)
class KeySchema:
    """The table's key attributes, in order (partition key, then sort key)."""

    attributes: tuple[KeyAttribute, ...]

    @classmethod
    def of(cls, table: TableSettings) -> KeySchema:
        attributes = (table.partition_key,) + ((table.sort_key,) if table.sort_key else ())
        for attribute in attributes:
            if attribute.name in RESERVED:
                raise PipelineError(
                    f"key attribute {attribute.name!r} collides with a pipeline column; "
                    f"reserved names: {sorted(RESERVED)}"
                )
        return cls(attributes)

    @property
    def names(self) -> list[str]:
        return [attribute.name for attribute in self.attributes]

    def fields(self) -> list[T.StructField]:
        return [
            T.StructField(attribute.name, _KEY_SPARK_TYPES[attribute.type], nullable=False)
            for attribute in self.attributes
        ]


def change_schema(keys: KeySchema) -> T.StructType:
    """Valid changes, one row per change: the key columns, the new image and bookkeeping."""
    return T.StructType(
        [
            *keys.fields(),
            T.StructField(ITEM_COLUMN, ITEM),
            T.StructField(SHARD_ID, T.StringType(), nullable=False),
            T.StructField(SEQUENCE, T.StringType(), nullable=False),
            T.StructField(EVENT, T.StringType(), nullable=False),
            T.StructField(CREATED, T.DoubleType()),
            T.StructField(LANDED, T.DoubleType()),
        ]
    )


def snapshot_schema(keys: KeySchema) -> T.StructType:
    """A snapshot row: the item's latest state and the change it came from (same columns as a change)."""
    return change_schema(keys)


CHANGES_PER_MINUTE = T.StructType(
    [
        T.StructField("minute", T.TimestampType(), nullable=False),
        T.StructField("event_name", T.StringType(), nullable=False),
        T.StructField("changes", T.LongType(), nullable=False),
    ]
)
LAG_PERCENTILES = T.StructType(
    [
        T.StructField("changes", T.LongType(), nullable=False),
        T.StructField("p50_seconds", T.DoubleType()),
        T.StructField("p90_seconds", T.DoubleType()),
        T.StructField("p99_seconds", T.DoubleType()),
        T.StructField("max_seconds", T.DoubleType()),
    ]
)
ITEMS_PER_SHARD = T.StructType(
    [
        T.StructField("shard_id", T.StringType(), nullable=False),
        T.StructField("items", T.LongType(), nullable=False),
        T.StructField("changes", T.LongType(), nullable=False),
    ]
)
VERIFY_RESULT = T.StructType(
    [
        T.StructField("status", T.StringType(), nullable=False),
        T.StructField("key", T.StringType(), nullable=False),
    ]
)

"""Change-log lines → typed changes, and the lines that are not changes, each with its reason.

A line that cannot be used is never dropped silently: :func:`parse_lines` marks it with a
``problem`` and :func:`bad_lines` lists it with its object and line number, so the entry point can
count, report and (beyond the tolerated number) fail the run.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline.schemas import (
    BAD_LINES,
    CHANGELOG_LINE,
    CREATED,
    EVENT,
    ITEM_COLUMN,
    LANDED,
    RAW_LINES,
    SEQUENCE,
    SEQUENCE_DIGITS,
    SHARD_ID,
    KeySchema,
    change_schema,
)

_WIRE_FIELDS = ("S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "M", "L")
# DynamoDB's number syntax: optional sign, digits with an optional fraction, optional exponent.
_NUMBER = r"^-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
_PROBLEM = "_problem"
_PARSED = "_parsed"
_KEY_FIELD = {"S": "S", "N": "N", "B": "B"}


def _field_count(value: Column) -> Column:
    """How many type keys an attribute value has (a valid one has exactly one)."""
    total = F.lit(0)
    for name in _WIRE_FIELDS:
        total = total + value[name].isNotNull().cast("int")
    return total


def _typed(value: Column) -> Column:
    """One wire attribute value → the :data:`pipeline.schemas.ATTRIBUTE` struct."""
    kind = F.lit(None).cast("string")
    for name in reversed(_WIRE_FIELDS):
        kind = F.when(value[name].isNotNull(), F.lit(name)).otherwise(kind)
    return F.struct(
        kind.alias("type"),
        value["S"].alias("s"),
        value["N"].alias("n"),
        value["B"].alias("b"),
        value["BOOL"].alias("bool"),
        value["SS"].alias("ss"),
        value["NS"].alias("ns"),
        value["BS"].alias("bs"),
        F.coalesce(value["M"], value["L"]).alias("doc"),
    )


def _image_problem(image: Column, label: str) -> Column:
    values = F.map_values(image)
    untyped = F.exists(values, lambda v: _field_count(v) != 1)
    bad_number = F.exists(values, lambda v: v["N"].isNotNull() & ~v["N"].rlike(_NUMBER))
    bad_set_number = F.exists(
        values, lambda v: v["NS"].isNotNull() & F.exists(v["NS"], lambda n: ~n.rlike(_NUMBER))
    )
    return (
        F.when(untyped, F.lit(f"{label} has an attribute value without exactly one known type key"))
        .when(bad_number | bad_set_number, F.lit(f"{label} has a number that is not a decimal number"))
        .otherwise(F.lit(None))
    )


def _problem(record: Column, keys: KeySchema) -> Column:
    """The first reason this line is not a usable change, or null."""
    checks: list[tuple[Column, str]] = [
        (record["v"].isNull(), 'not a change-log record (malformed JSON or no "v")'),
        (record["v"] != 1, "unsupported change-log format version (this reader knows v=1)"),
        (F.coalesce(F.length(record["shardId"]), F.lit(0)) == 0, "no shardId"),
        (
            ~F.coalesce(record["sequenceNumber"].rlike(rf"^[0-9]{{1,{SEQUENCE_DIGITS}}}$"), F.lit(False)),
            f"sequenceNumber is not 1 to {SEQUENCE_DIGITS} digits",
        ),
        (
            ~F.coalesce(record["eventName"].isin("INSERT", "MODIFY", "REMOVE"), F.lit(False)),
            "eventName is not INSERT, MODIFY or REMOVE",
        ),
        (record["keys"].isNull(), "no keys"),
    ]
    for attribute in keys.attributes:
        value = record["keys"][attribute.name]
        checks.append(
            (
                value.isNull() | value[_KEY_FIELD[attribute.type]].isNull() | (_field_count(value) != 1),
                f"keys lack {attribute.name!r} of type {attribute.type} (the table's key schema)",
            )
        )
    problem: Column = F.coalesce(
        _image_problem(record["keys"], "keys"), _image_problem(record["newImage"], "newImage")
    )
    for failed, message in reversed(checks):
        problem = F.when(F.coalesce(failed, F.lit(True)), F.lit(message)).otherwise(problem)
    return problem


def parse_lines(raw: DataFrame, keys: KeySchema) -> DataFrame:
    """:data:`RAW_LINES` → every line with its parsed record and a ``_problem`` (null when valid).

    Blank lines are ignored (a trailing newline is not a change).
    """
    raw = raw.select(*RAW_LINES.fieldNames())
    parsed = raw.filter(F.length(F.trim("value")) > 0).withColumn(
        _PARSED, F.from_json("value", CHANGELOG_LINE, {"mode": "PERMISSIVE"})
    )
    return parsed.withColumn(_PROBLEM, _problem(F.col(_PARSED), keys))


def valid_changes(parsed: DataFrame, keys: KeySchema) -> DataFrame:
    """The usable changes of :func:`parse_lines`, in :func:`pipeline.schemas.change_schema` form.

    Key attributes become columns; the item is the new image (or, for a KEYS_ONLY stream, the keys)
    and is null for a REMOVE. Sequence numbers are zero-padded to 40 digits so that comparing the
    strings compares the integers (they can exceed Spark's 38-digit decimals).
    """
    record = F.col(_PARSED)
    image = F.coalesce(record["newImage"], record["keys"])
    item = F.when(record["eventName"] == "REMOVE", F.lit(None)).otherwise(
        F.transform_values(image, lambda _, v: _typed(v))
    )
    key_columns = [record["keys"][a.name][_KEY_FIELD[a.type]].alias(a.name) for a in keys.attributes]
    changes = parsed.filter(F.col(_PROBLEM).isNull()).select(
        *key_columns,
        item.alias(ITEM_COLUMN),
        record["shardId"].alias(SHARD_ID),
        F.lpad(record["sequenceNumber"], SEQUENCE_DIGITS, "0").alias(SEQUENCE),
        record["eventName"].alias(EVENT),
        record["approximateCreationDateTime"].alias(CREATED),
        record["landedAt"].alias(LANDED),
    )
    return _cast(changes, keys)


def _cast(changes: DataFrame, keys: KeySchema) -> DataFrame:
    """Select in schema order with the schema's types (nullability is documented by the schema)."""
    schema = change_schema(keys)
    return changes.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def bad_lines(parsed: DataFrame, raw: DataFrame) -> DataFrame:
    """:data:`BAD_LINES`: each unusable line with its object, 1-based line number and reason.

    ``raw`` gives each object's first position, which turns positions into line numbers.
    """
    first = raw.groupBy("file").agg(F.min("position").alias("_first"))
    bad = parsed.filter(F.col(_PROBLEM).isNotNull())
    return (
        bad.join(first, "file")
        .select(
            F.col("file"),
            (F.col("position") - F.col("_first") + 1).alias("line"),
            F.col(_PROBLEM).alias("problem"),
            F.substring("value", 1, 200).alias("text"),
        )
        .select(*[F.col(f.name) for f in BAD_LINES.fields])
    )


def problems(parsed: DataFrame) -> DataFrame:
    """Only the unusable lines of :func:`parse_lines` (still with positions)."""
    return parsed.filter(F.col(_PROBLEM).isNotNull())

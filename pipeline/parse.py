"""Change-log lines → typed changes, and the lines that are not changes, each with its reason.

A line that cannot be used is never dropped silently: :func:`parse_lines` marks it with a
``_problem`` and :func:`bad_lines` lists it with its object, line number and text, so the entry point
can count, report and (beyond the tolerated number) fail the run.

Cost matters here (this is most of the snapshot job): the JSON is parsed once and every line is
validated on its wire form with compiled expressions only where possible (Spark's higher-order
functions, ``filter`` and the like, are interpreted and paid per attribute of every change). Typing
an image is a compiled ``cast`` to the stored shape (:data:`pipeline.schemas.ATTRIBUTE` has the
wire's fields), which a full rebuild still leaves to each key's winner
(``parse_lines(..., typed=False)``, then :func:`typed_item`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline.schemas import (
    BAD_LINES,
    CHANGELOG_LINE,
    CREATED,
    EVENT,
    ITEM,
    ITEM_COLUMN,
    LANDED,
    RAW_LINES,
    SEQUENCE,
    SEQUENCE_DIGITS,
    SHARD_ID,
    WIRE_ATTRIBUTE,
    WIRE_ITEM,
    KeySchema,
    change_schema,
)

_PROBLEM = "_problem"
_PARSED = "_parsed"
_KEY_FIELD = {"S": "S", "N": "N", "B": "B"}
# A line holding something other than JSON's whitespace (space, tab, CR, LF: what Jackson skips).
BLANK_FREE = "[^ \\t\\r\\n]"


def _try_cast(column: Column, kind: str) -> Column:
    """``column`` as ``kind``, null where a value does not convert: ``try_cast`` on PySpark 4,
    whose ANSI mode makes ``cast`` fail instead; EMR's PySpark 3.5 has no ``Column.try_cast``, and
    its ``cast`` gives null while ANSI mode is off (:func:`pipeline.session.build_session` sees to it)."""
    if hasattr(Column, "try_cast"):
        return column.try_cast(kind)
    return column.cast(kind)


def _some_not(values: Column, as_type: str) -> Column:
    """True when a non-null element of an array does not convert to ``as_type`` (false when none
    does; null when the array is).

    One interpreted ``exists``, which stops at the first failure and builds no array: it took a
    rebuild of the bench's million changes 2.3 CPU s less than casting the whole array and comparing
    the sizes of two ``array_compact``s (an interpreted ``filter`` each, building a new array). The
    compiled alternative (sorting the array so that its nulls come first, slicing them off, casting
    the rest and sorting again) made the parse's generated method larger than the JIT compiles
    (tests/pipeline/test_generated_code.py), so every line ran interpreted."""
    return F.exists(values, lambda value: value.isNotNull() & _try_cast(value, as_type).isNull())


def _no_type() -> Column:
    """A wire attribute none of whose type fields is set: the JSON reader's result for an unknown type."""
    return F.struct(*[F.lit(None).cast(f.dataType).alias(f.name) for f in WIRE_ATTRIBUTE.fields])


def _image_problem(image: Column) -> Column:
    """Why a wire image is unusable: an attribute of no known type, or a number that is not one.

    Written without lambdas where possible: ``array_contains`` of the all-null struct finds an
    attribute with no type field set, and is null (no match, but a null element) when an attribute
    value is JSON null — both attributes of no type. ``map_values(image).N``
    extracts a field from every struct at once, and one interpreted ``exists`` casts its non-null
    elements until one fails (:func:`_some_not`). (A regular expression inside ``exists`` cost four
    times the whole parse in the benchmark; one ``array_compact`` per type field, an interpreted
    ``filter`` each, cost more than the interpreted typing of an image that items had before they
    were stored in the wire's shape.)
    """
    values = F.map_values(image)
    untyped = F.coalesce(F.array_contains(values, _no_type()), F.lit(True))
    bad_number = _some_not(values["N"], "double")
    # Only where some attribute is a number set (``array_max`` is null when all are null): the check
    # takes an interpreted ``filter`` and ``exists``, and most lines have no number set.
    number_sets = values["NS"]
    bad_set_number = F.array_max(number_sets).isNotNull() & _some_not(
        F.flatten(F.array_compact(number_sets)), "double"
    )
    return F.when(
        untyped | bad_number | bad_set_number,
        F.lit("newImage has an attribute of no known type, or a number that is not a decimal number"),
    )


def typed_item(image: Column) -> Column:
    """A wire image (:data:`pipeline.schemas.WIRE_ITEM`) → the stored item (:data:`ITEM`): the same
    fields in the same order, renamed, so a compiled cast."""
    return image.cast(ITEM)


def _problem(record: Column, image: Column, keys: KeySchema) -> Column:
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
                value.isNull() | value[_KEY_FIELD[attribute.type]].isNull(),
                f"keys lack {attribute.name!r} of type {attribute.type} (the table's key schema)",
            )
        )
    problem: Column = _image_problem(image)
    for failed, message in reversed(checks):
        problem = F.when(F.coalesce(failed, F.lit(True)), F.lit(message)).otherwise(problem)
    return problem


def parse_lines(raw: DataFrame, keys: KeySchema, *, typed: bool = True) -> DataFrame:
    """:data:`RAW_LINES` → one row per non-blank line: ``file``, ``position``, ``_problem`` (null when
    the line is a usable change) and the columns of :func:`pipeline.schemas.change_schema`.

    Key attributes become columns; the item is the new image (or, for a KEYS_ONLY stream, the keys)
    and is null for a REMOVE. Sequence numbers are zero-padded to 40 digits so that comparing the
    strings compares the integers (they can exceed Spark's 38-digit decimals).

    ``typed=False`` leaves the item in its wire form (:data:`pipeline.schemas.WIRE_ITEM`, validated
    all the same) for a caller that keeps only some changes and types those with :func:`typed_item`.
    """
    # Blank: nothing but JSON's whitespace (what the JSON reader skips, :func:`parse_records`); a
    # search for another character stops at the first one, where ``length(trim(value)) > 0`` copied
    # every line (a tenth of the parse's cost).
    lines = raw.select(*RAW_LINES.fieldNames()).filter(F.col("value").rlike(BLANK_FREE))
    parsed = lines.select(
        "file", "position", F.from_json("value", CHANGELOG_LINE, {"mode": "PERMISSIVE"}).alias(_PARSED)
    )
    return _checked(parsed, F.col(_PARSED), keys, typed)


def parse_records(records: DataFrame, keys: KeySchema, *, typed: bool = True) -> DataFrame:
    """The JSON reader's rows (the fields of :data:`CHANGELOG_LINE` and ``file``, one row per
    non-blank line) → :func:`parse_lines`' columns, validated alike, ``position`` null: the reader
    knows no line numbers (:func:`pipeline.log_lines.read_records`)."""
    record = F.struct(*[F.col(name) for name in CHANGELOG_LINE.fieldNames()])
    located = records.select("file", F.lit(None).cast("long").alias("position"), record.alias(_PARSED))
    return _checked(located, F.col(_PARSED), keys, typed)


def _checked(parsed: DataFrame, record: Column, keys: KeySchema, typed: bool) -> DataFrame:
    """``file``, ``position``, ``_problem`` and the change's columns, from each line's ``record``."""
    image = F.coalesce(record["newImage"], record["keys"])
    item = F.when(record["eventName"] == "REMOVE", F.lit(None)).otherwise(image)  # cast below
    schema = change_schema(keys)
    columns = {
        **{a.name: record["keys"][a.name][_KEY_FIELD[a.type]] for a in keys.attributes},
        ITEM_COLUMN: item,
        SHARD_ID: record["shardId"],
        SEQUENCE: F.lpad(record["sequenceNumber"], SEQUENCE_DIGITS, "0"),
        EVENT: record["eventName"],
        CREATED: record["approximateCreationDateTime"],
        LANDED: record["landedAt"],
    }
    item_type = ITEM if typed else WIRE_ITEM
    return parsed.select(
        "file",
        "position",
        _problem(record, image, keys).alias(_PROBLEM),
        *[
            columns[f.name].cast(item_type if f.name == ITEM_COLUMN else f.dataType).alias(f.name)
            for f in schema.fields
        ],
    )


def valid_changes(parsed: DataFrame, keys: KeySchema, extra: tuple[str, ...] = ()) -> DataFrame:
    """The usable changes of :func:`parse_lines`, in :func:`pipeline.schemas.change_schema` form
    (plus the ``extra`` columns the caller added to ``parsed``)."""
    names = change_schema(keys).fieldNames()
    return parsed.filter(F.col(_PROBLEM).isNull()).select(*names, *extra)


def problems(parsed: DataFrame) -> DataFrame:
    """Only the unusable lines of :func:`parse_lines` (with object, position and reason)."""
    return parsed.filter(F.col(_PROBLEM).isNotNull()).select("file", "position", _PROBLEM)


def bad_lines(bad: DataFrame, raw: DataFrame) -> DataFrame:
    """:data:`BAD_LINES`: each unusable line with its object, 1-based line number, reason and text.

    ``raw`` gives each object's first position (positions → line numbers) and the line's text.
    """
    first = raw.groupBy("file").agg(F.min("position").alias("_first"))
    text = raw.select("file", "position", F.substring("value", 1, 200).alias("text"))
    located = bad.join(first, "file").join(text, ["file", "position"])
    return located.select(
        F.col("file"),
        (F.col("position") - F.col("_first") + 1).alias("line"),
        F.col(_PROBLEM).alias("problem"),
        F.col("text"),
    ).select(*BAD_LINES.fieldNames())

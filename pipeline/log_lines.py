"""The change log's lines as Spark reads them, and what is wrong with them, said in the user's terms.

Every job starts here: the objects' lines (:func:`read_lines`), parsed and checked
(:func:`parse_checked`); a malformed line is reported with its object, line number and text, and
the run fails beyond ``tolerate_bad_lines`` (:func:`report_bad_lines`); an object Spark cannot read
(corrupt gzip, gone from storage) is named instead of surfacing as a JVM stack trace
(:func:`reading`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline import parse
from pipeline.changelog import Selection
from pipeline.errors import BadChangeLogError
from pipeline.schemas import CHANGELOG_LINE, KeySchema
from pipeline.storage import spark_uri

Progress = Callable[[str], None]
ResultT = TypeVar("ResultT")
REPORTED_BAD_LINES = 20
_UNREADABLE = re.compile(
    r"FAILED_READ_FILE|Encountered error while reading file|not in GZIP format|EOFException|"
    r"ZipException|Unexpected end of input stream|CORRUPT|FileNotFoundException",
    re.IGNORECASE,
)
_PATH_IN_ERROR = re.compile(r"((?:file|s3a?|s3n|hdfs)://?[^\s,;\"']+)")


def quiet(_: str) -> None:
    return None


def read_lines(spark: SparkSession, uris: Sequence[str]) -> DataFrame:
    """The change log's lines (:data:`pipeline.schemas.RAW_LINES`); gzip is decompressed by name."""
    text = spark.read.text([spark_uri(u) for u in uris])
    return text.select(
        "value",
        F.col("_metadata.file_path").alias("file"),
        F.monotonically_increasing_id().alias("position"),
    )


def read_records(spark: SparkSession, uris: Sequence[str]) -> DataFrame:
    """The change log's lines as Spark's JSON reader parses them: the fields of
    :data:`pipeline.schemas.CHANGELOG_LINE` and ``file``, one row per non-blank line (a line that is
    not a JSON object gets every field null, as ``from_json`` gives it). Cheaper than
    :func:`read_lines` and ``from_json`` (the reader parses each line's bytes where it read them),
    but without line numbers: a run that finds bad lines reads their objects again as text to say
    where they are (:func:`pipeline.full_run.plan`)."""
    records = (
        spark.read.schema(CHANGELOG_LINE).option("mode", "PERMISSIVE").json([spark_uri(u) for u in uris])
    )
    return records.select(*CHANGELOG_LINE.fieldNames(), F.col("_metadata.file_path").alias("file"))


def reading(action: Callable[[], ResultT]) -> ResultT:
    """Run a Spark action that reads the change log; an object that cannot be read names itself."""
    try:
        return action()
    except Exception as exc:  # py4j / pyspark wrap the JVM's exception; classified by its text
        message = str(exc)
        if not _UNREADABLE.search(message):
            raise
        found = _PATH_IN_ERROR.search(message)
        where = found.group(1) if found else "(the error names no object)"
        first_line = next((line for line in message.splitlines() if line.strip()), message)[:300]
        raise BadChangeLogError(f"1 unreadable change-log object: {where}: {first_line}") from exc


@dataclass(frozen=True)
class ParsedLog:
    parsed: DataFrame
    raw: DataFrame
    lines: int
    bad: int


def parse_checked(
    spark: SparkSession, uris: Sequence[str], keys: KeySchema, tolerate: int, progress: Progress
) -> ParsedLog:
    """Parse the objects, report every malformed line with its location, fail beyond ``tolerate``."""
    raw = read_lines(spark, uris)
    # Parsed once and kept: validation, watermarks and the merge all read it (never the JSON again).
    parsed = parse.parse_lines(raw, keys).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = reading(
            lambda: {
                row["bad"]: row["n"]
                for row in parsed.groupBy(F.col("_problem").isNotNull().alias("bad"))
                .agg(F.count(F.lit(1)).alias("n"))
                .collect()
            }
        )
        bad = int(counts.get(True, 0))
        lines = bad + int(counts.get(False, 0))
        report_bad_lines(parsed, raw, (bad, lines), tolerate, progress)
    except BaseException:
        parsed.unpersist()
        raise
    return ParsedLog(parsed, raw, lines, bad)


def report_bad_lines(
    parsed: DataFrame, raw: DataFrame, counts: tuple[int, int], tolerate: int, progress: Progress
) -> None:
    """List up to :data:`REPORTED_BAD_LINES` malformed lines; past ``tolerate`` of them, fail the
    run before it writes anything."""
    bad, lines = counts
    if not bad:
        return
    shown = parse.bad_lines(parse.problems(parsed), raw).orderBy("file", "line")
    listing = [
        f"  {row['file']}:{row['line']}: {row['problem']}: {row['text']!r}"
        for row in reading(lambda: shown.limit(REPORTED_BAD_LINES).collect())
    ]
    more = f"\n  … and {bad - len(listing)} more" if bad > len(listing) else ""
    report = f"{bad} malformed change-log line(s) of {lines}:\n" + "\n".join(listing) + more
    if bad > tolerate:
        raise BadChangeLogError(
            f"{report}\nthe run tolerates {tolerate} (pipeline.tolerate_bad_lines or "
            f"--tolerate-bad-lines); nothing was written"
        )
    progress(f"warning: {report}\n  tolerated ({bad} <= {tolerate}); these lines are not in the result")


def name_watermarks(selection: Selection) -> dict[str, str]:
    """Per shard, the highest last sequence number named by the objects read (the sink's contract)."""
    marks: dict[str, str] = {}
    for obj in selection.to_read:
        if obj.shard_id is not None and obj.last is not None and obj.last > marks.get(obj.shard_id, ""):
            marks[obj.shard_id] = obj.last
    return marks

"""Patching a bucket (merge-on-read): the changed keys' new rows, and the old rows they delete.

Only the changed keys are looked at: their live rows in either table, located (the data file and
row position a position delete names) and read with only the columns that order changes; and their
new changes. Per key the latest row wins, as in :mod:`pipeline.snapshot`. A new change that wins is
written as a new row; every located row that is not the winner is deleted — the old version of the
key, and also a second live row, which a run that committed the tombstones table but failed before
the snapshot table can leave behind (so re-running a half-committed run repairs it). A located row
that wins stays where it is, and nothing is written for its key.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from pipeline.reading import FILE, POS
from pipeline.schemas import LANDED, SEQUENCE, SHARD_ID, KeySchema
from pipeline.snapshot import CHANGES, NEW
from pipeline.stored import BUCKET, stored_schema

ORDER_COLUMNS = (SEQUENCE, SHARD_ID, LANDED)  # all a located row needs besides its key and place
_WINNER = "_winner"
_OLD = "_old"


def patch(located: DataFrame, changes: DataFrame, keys: KeySchema) -> DataFrame:
    """Per changed key: ``_winner`` (the latest row: every stored column, :data:`NEW`, and where it
    lives if it is a located row), ``_old`` (the located rows to delete) and :data:`CHANGES`.

    ``located``: keys, bucket, :data:`ORDER_COLUMNS`, :data:`FILE`, :data:`POS`;
    ``changes``: the stored schema's columns plus :data:`NEW` (true).
    """
    stored = stored_schema(keys)
    place = [FILE, POS]
    old = located.select(
        *[
            F.col(f.name) if f.name in located.columns else F.lit(None).cast(f.dataType).alias(f.name)
            for f in stored.fields
        ],
        F.lit(False).alias(NEW),
        *place,
    )
    new = changes.select(
        *stored.fieldNames(),
        F.col(NEW),
        F.lit(None).cast("int").alias(FILE),
        F.lit(None).cast("long").alias(POS),
    )
    group = [BUCKET, *keys.names]
    rest = [c for c in old.columns if c not in group]
    order = F.struct(F.col(SEQUENCE), F.col(SHARD_ID), F.coalesce(F.col(LANDED), F.lit(0.0)))
    latest = (
        old.unionByName(new)
        .groupBy(*group)
        .agg(
            F.max_by(F.struct(*rest), order).alias(_WINNER),
            F.collect_list(F.when(F.col(FILE).isNotNull(), F.struct(*place))).alias("_located"),
            F.size(F.collect_set(F.when(F.col(NEW), F.struct(F.col(SHARD_ID), F.col(SEQUENCE))))).alias(
                CHANGES
            ),
        )
    )
    winner_place = F.struct(*[F.col(_WINNER)[c].alias(c) for c in place])
    return latest.select(
        *group,
        _WINNER,
        F.filter("_located", lambda row: ~row.eqNullSafe(winner_place)).alias(_OLD),
        CHANGES,
    )


def new_rows(patched: DataFrame, keys: KeySchema) -> DataFrame:
    """The rows to write: keys whose winner is a new change, in the stored schema plus :data:`CHANGES`."""
    names = stored_schema(keys).fieldNames()
    group = [BUCKET, *keys.names]
    return patched.filter(F.col(_WINNER)[NEW]).select(
        *[F.col(n) if n in group else F.col(_WINNER)[n].alias(n) for n in names], CHANGES
    )


def deleted_rows(patched: DataFrame) -> DataFrame:
    """The located rows to delete: bucket, :data:`FILE`, :data:`POS`."""
    old = patched.select(BUCKET, F.explode(_OLD).alias("o"))
    return old.select(BUCKET, F.col("o")[FILE].alias(FILE), F.col("o")[POS].alias(POS))

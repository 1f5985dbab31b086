"""A base for the snapshot: rows holding a table's state at a time ``T`` (a bootstrap's export or
scan, or a reload the workers landed in the change log), committed to the ``<table>_base`` Iceberg
table; the snapshot's next run is a full one, the base plus every change created at or after ``T``.

The rows are kept (in memory, spilling to disk) while their keys are sampled for the tables' key
ranges (:mod:`pipeline.ranges`: the base holds most of the table's keys, so its sample lays the table
out better than the change log's would) and counted, then written once.
"""

from __future__ import annotations

import datetime as dt
import uuid

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812  (the PySpark idiom)

from ground.settings import Settings
from pipeline import bootstrap, ranges, snapshot
from pipeline.log_lines import reading
from pipeline.run_plan import with_bucket
from pipeline.schemas import KeySchema
from pipeline.storage import Store, store_for
from pipeline.table import DEFAULT_BUCKETS, SnapshotTables, as_file_uri

SAMPLED_KEYS = 200_000  # keys of the base sampled for its ranges


def commit_base(
    spark: SparkSession,
    settings: Settings,
    rows: DataFrame,
    start_time: float,
    *,
    tables: SnapshotTables,
    store: Store | None = None,
    buckets: int = DEFAULT_BUCKETS,
) -> int:
    """Write ``rows`` (snapshot rows, the state at ``start_time``) as the base; returns their count."""
    keys = KeySchema.of(settings.table)
    out_store = store or store_for(settings.pipeline.snapshot_uri, spark)
    count = tables.ensure(buckets)
    out = tables.data_uri(f"base-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
    kept = rows.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        totals = reading(
            lambda: kept.agg(
                F.count(F.lit(1)).alias("items"),
                F.count_if(bootstrap.any_key_missing(keys)).alias("keyless"),
            ).first()
        )
        items = int(totals["items"]) if totals is not None else 0
        if totals is not None and int(totals["keyless"]):
            raise bootstrap.BootstrapError(
                f"{totals['keyless']} item(s) lack the table's key attributes {keys.names}: "
                "is this the table's export?"
            )
        fraction = min(1.0, SAMPLED_KEYS / max(items, 1))
        sample = kept.select(*keys.names).sample(fraction=fraction, seed=7).collect()
        layout = ranges.choose([tuple(row) for row in sample], count)
        base = with_bucket(kept, keys, layout or ranges.KeyRanges(()))
        reading(lambda: snapshot.write_parts(base, out, keys))
        files = [as_file_uri(f) for f in out_store.list_files(out) if f.endswith(".parquet")]
        tables.commit_base(files, start_time, layout)
    except BaseException:
        out_store.remove_tree(out)
        raise
    finally:
        kept.unpersist()
    return items

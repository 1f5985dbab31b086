"""One quiet Spark session per process.

Locally: ``settings.pipeline.spark_master`` (``local[2]``), no UI, few shuffle partitions (the data
of one machine does not need 200), UTC. Under ``spark-submit`` the master comes from the submitter.
"""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession


def build_session(
    master: str | None, app_name: str = "consumer-pipeline", shuffle_partitions: int = 4
) -> SparkSession:
    # Python workers (the verify UDF) must run the same interpreter, with the same packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = (
            builder.master(master)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.default.parallelism", str(shuffle_partitions))
            .config("spark.driver.memory", "2g")
            .config("spark.ui.showConsoleProgress", "false")
        )
    spark = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.sources.partitionOverwriteMode", "static")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    return spark

"""One quiet Spark session per process.

Locally: ``settings.pipeline.spark_master`` (``local[2]``), no UI, few shuffle partitions (the data
of one machine does not need 200), UTC, bound to the loopback address. Under ``spark-submit`` the
master comes from the submitter.

Quiet by default (``verbose=False``), errors always shown:

* the JVM logs at ERROR through :data:`QUIET_LOG4J2` (passed with ``-Dlog4j2.configurationFile``),
  which also stops Spark's "Using Spark's default log4j profile" / "Setting default log level"
  banners, printed only when no configuration file is given;
* the JVM's stderr is relayed line by line, less the lines of :data:`JVM_NOISE` (the module
  system's "WARNING: Using incubator modules", which no JVM option turns off);
* one Python warning is ignored, by message and category, in this process and in Spark's Python
  workers (``PYTHONWARNINGS``, inherited through the JVM): PySpark's FutureWarning that it does
  not yet fully support the installed pandas (3.x; the jobs use no pandas API).

``verbose=True`` leaves Spark's own logging (WARN), its banners and every warning as they are.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from pipeline import class_archive

QUIET_LOG4J2 = """\
# consumer pipeline: Spark's JVM logs errors only (`consumer pipeline ... -v` shows warnings too).
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# PySpark's gateway logs as an interpreter: unless its logger has a level of its own equal to the
# root's, Spark prints "Setting default log level to WARN" and lets warnings through to the console.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""

JVM_NOISE: tuple[re.Pattern[str], ...] = (re.compile(r"^WARNING: Using incubator modules: "),)

PANDAS_SUPPORT_WARNING = "PySpark does not yet fully support pandas"


def quiet_python_warnings(environ: dict[str, str] | None = None) -> None:
    """Ignore PySpark's pandas-support FutureWarning here and in the processes ``environ`` starts."""
    warnings.filterwarnings("ignore", message=PANDAS_SUPPORT_WARNING, category=FutureWarning)
    target = os.environ if environ is None else environ
    entry = f"ignore:{PANDAS_SUPPORT_WARNING}:FutureWarning"
    present = [part for part in target.get("PYTHONWARNINGS", "").split(",") if part]
    if entry not in present:
        target["PYTHONWARNINGS"] = ",".join([*present, entry])


def is_noise(line: str) -> bool:
    return any(pattern.search(line) for pattern in JVM_NOISE)


def relay(source: Iterable[bytes], destination: IO[str]) -> None:
    """Copy the JVM's stderr to ``destination`` line by line, without the :data:`JVM_NOISE` lines."""
    for raw in source:
        line = raw.decode("utf-8", errors="replace")
        if is_noise(line):
            continue
        try:
            destination.write(line)
            destination.flush()
        except (OSError, ValueError):  # our stderr went away (the process is ending): drain quietly
            continue


def _quiet_log4j2_file() -> Path:
    handle, name = tempfile.mkstemp(prefix="consumer-pipeline-log4j2-", suffix=".properties")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(QUIET_LOG4J2)
    return Path(name)


def _launch_quiet_gateway(conf: SparkConf) -> Any:
    """Start the driver JVM with its stderr piped through :func:`relay` (a daemon thread)."""
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    process = gateway.proc
    if process is not None and process.stderr is not None:
        threading.Thread(
            target=relay, args=(process.stderr, sys.stderr), name="spark-jvm-stderr", daemon=True
        ).start()
    return gateway


def build_session(
    master: str | None,
    app_name: str = "consumer-pipeline",
    shuffle_partitions: int = 4,
    *,
    verbose: bool = False,
    extra_java_options: str = "",
) -> SparkSession:
    """The process's session; a local master's driver JVM starts on the class archive when there is
    one (pipeline/class_archive.py). ``extra_java_options`` go to that JVM too (and replace the
    archive: the archive's own build passes the option that writes it)."""
    # Python workers (the verify UDF) must run the same interpreter, with the same packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if not verbose:
        quiet_python_warnings()
    options: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "static",
    }
    if int(pyspark.__version__.split(".")[0]) < 4:
        # EMR's 3.5 has no Column.try_cast: a failed cast must give null there (pipeline/parse.py).
        options["spark.sql.ansi.enabled"] = "false"
    log4j2: Path | None = None
    java_options = [extra_java_options] if extra_java_options else []
    if master is not None:
        if master.startswith("local"):
            # This machine only: bind to the loopback address, not to whatever the host name
            # resolves to (Spark warns when that is a loopback address and picks another).
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        options.update(
            {
                "spark.master": master,
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": str(shuffle_partitions),
                "spark.default.parallelism": str(shuffle_partitions),
                "spark.driver.memory": "2g",
                "spark.ui.showConsoleProgress": "false",
            }
        )
        if master.startswith("local"):
            # Jobs read files by path (the change log's objects, a table's data files): above 32
            # paths Spark checks them with a distributed job, which on one machine costs more than
            # the driver doing it (0.7 s against 0.1 s for a 144-file table in bench.pipeline_table).
            options["spark.sql.sources.parallelPartitionDiscovery.threshold"] = "100000"
            if not extra_java_options:
                java_options.append(class_archive.java_options())
        if not verbose:
            log4j2 = _quiet_log4j2_file()
            java_options.append(f"-Dlog4j2.configurationFile=file:{log4j2}")
        if any(java_options):
            options["spark.driver.extraJavaOptions"] = " ".join(o for o in java_options if o)
    try:
        fresh_jvm = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ
        if not verbose and master is not None and fresh_jvm:
            conf = SparkConf().setAppName(app_name).setAll(list(options.items()))
            SparkContext(conf=conf, gateway=_launch_quiet_gateway(conf))
        builder = SparkSession.builder.appName(app_name)
        for key, value in options.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    finally:
        if log4j2 is not None:
            log4j2.unlink(missing_ok=True)  # read once, when the JVM started
    spark.sparkContext.setLogLevel("ERROR" if not verbose else "WARN")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    return spark

"""A class-data-sharing archive of the classes a local pipeline run loads, so that each local Spark
driver JVM starts on about two thirds of the CPU.

Every local run (``consumer pipeline ...``, ``consumer pipeline follow``'s restarts, the demo, the
tests) starts a fresh driver JVM, and most of a small job's CPU goes to loading, verifying and
linking the same classes of Spark, Parquet and Jackson each time. HotSpot's dynamic class-data
sharing (JDK 13+) maps them from one file, already parsed and verified: on a 2-core machine a
session, a window over 200 000 rows and a Parquet write and read took 25 CPU s of the JVM's
without the archive and 17-18 with it.

``make setup`` builds the archive once per (Java runtime, PySpark) pair with
``python -m pipeline.build_class_archive``. :func:`java_options` is what
:func:`pipeline.session.build_session` adds for a local master when the archive exists. The
archive's name carries a digest of the runtime and the class path it was built for; should it
still not fit (a damaged file, a runtime changed in place), the JVM ignores it and loads classes
as usual, silently (the CDS log tags are off), so the cost of a stale archive is only the lost
saving. EMR starts its own JVMs and never sees it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pyspark

SILENT = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java_home() -> Path | None:
    """The runtime spark-submit starts: ``$JAVA_HOME``, else the ``java`` on the PATH."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"]).resolve()
    java = shutil.which("java")
    return Path(java).resolve().parent.parent if java else None


def _fingerprint() -> str | None:
    """What the archive must match: the runtime's JVM library (path, size, time) and PySpark's jars."""
    home = _java_home()
    if home is None:
        return None
    jvm = home / "lib" / "server" / "libjvm.so"
    try:
        stat = jvm.stat()
    except OSError:
        return None
    jars = (Path(pyspark.__file__).parent / "jars").resolve()
    parts = [str(jvm), str(stat.st_size), str(stat.st_mtime_ns), str(jars), pyspark.__version__]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "consumer-pipeline"


def archive_path() -> Path | None:
    """Where this runtime's and this PySpark's archive is (or would be); None without a runtime."""
    fingerprint = _fingerprint()
    if fingerprint is None:
        return None
    return cache_dir() / f"spark-classes-{pyspark.__version__}-{fingerprint}.jsa"


def java_options() -> str:
    """The driver JVM's options that use the archive, or "" when there is none for this runtime."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {SILENT}"

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
archive's name carries a digest of the runtime and the class path it was built for (each jar's
size and time too, as the JVM checks them); should it still not fit (a damaged file), the JVM
ignores it and loads classes as usual, silently (the CDS log tags are off), so the cost of a
stale archive is only the lost saving. EMR starts its own JVMs and never sees it.
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
    """What the archive must match, as the JVM checks it: the runtime (its JVM library, its module
    image, its base archive) and every jar on the class path, each by path, size and time.

    The JVM refuses a dynamic archive when any class-path jar's size or modification time differs
    from the build's, so a virtual environment installed afresh at the same path (a clean clone)
    needs a new archive even though nothing else changed: the jars' times are in the name."""
    home = _java_home()
    if home is None:
        return None
    jars = (Path(pyspark.__file__).parent / "jars").resolve()
    runtime = [
        home / "lib" / "server" / "libjvm.so",
        home / "lib" / "modules",
        home / "lib" / "server" / "classes.jsa",
    ]
    try:
        files = [(path, path.stat()) for path in runtime[:2]]
        files += [(path, path.stat()) for path in runtime[2:] if path.exists()]
        files += [(path, path.stat()) for path in sorted(jars.glob("*.jar"))]
    except OSError:
        return None
    parts = [pyspark.__version__, str(jars)]
    parts += [f"{path} {stat.st_size} {stat.st_mtime_ns}" for path, stat in files]
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

"""The local driver JVM's class archive (pipeline/class_archive.py): found for the runtime it was
built for, ignored for any other, and really mapped by the JVMs the pipeline starts.

A JVM that cannot use the archive says nothing (the CDS log tags are off, so a stale archive never
pollutes a quiet run), which is why the last test looks at the JVM itself: an archive built by
``make setup`` but silently refused would cost every local Spark start its saving unnoticed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipeline import class_archive


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "consumer-pipeline"


def test_no_archive_means_no_options(cache: Path) -> None:
    path = class_archive.archive_path()
    assert path is not None and path.parent == cache and not path.exists()
    assert class_archive.java_options() == ""


def test_an_archive_for_this_runtime_is_passed_with_the_cds_logs_off(cache: Path) -> None:
    path = class_archive.archive_path()
    assert path is not None
    cache.mkdir()
    path.write_bytes(b"not really an archive: the JVM ignores it, silently")
    options = class_archive.java_options().split()
    assert options == [f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def test_another_runtime_or_pyspark_gets_another_name(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = class_archive.archive_path()
    monkeypatch.setattr(class_archive.pyspark, "__version__", "3.5.2")
    other_pyspark = class_archive.archive_path()
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jdk")
    assert class_archive.archive_path() is None  # no runtime there: no archive, no options
    assert class_archive.java_options() == ""
    assert here is not None and other_pyspark is not None and here.name != other_pyspark.name


def test_a_jar_installed_again_gets_another_name(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean clone installs PySpark afresh at the same path: same jars, new times. The JVM refuses
    an archive whose class-path jars changed time (CI found one refused so, silently), so the name
    must change with them and ``make setup`` build a new one."""
    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    jar = jars / "spark-core.jar"
    jar.write_bytes(b"jar")
    monkeypatch.setattr(class_archive.pyspark, "__file__", str(tmp_path / "pyspark" / "__init__.py"))
    before = class_archive.archive_path()
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    after = class_archive.archive_path()
    assert before is not None and after is not None and before != after


def test_the_pipeline_sessions_jvm_maps_the_archive_make_setup_built(spark: SparkSession) -> None:
    path = class_archive.archive_path()
    assert path is not None and path.is_file(), (
        f"no class archive at {path}: `make setup` builds it (python -m pipeline.build_class_archive)"
    )
    process = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
    maps = Path(f"/proc/{process.pid}/maps").read_text(encoding="utf-8")
    assert str(path) in maps, f"the driver JVM did not map {path}: it refused the archive, silently"

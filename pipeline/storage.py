"""Where the pipeline's files live: a local directory, or any Hadoop file system (s3:// on EMR).

The snapshot's versions and its pointer need three things of a store — list a tree, read a small
text object, replace a small text object *atomically* — plus uploading a local file (the stats
chart). Locally the pointer is written to a temporary name and renamed (``os.replace`` is atomic on
POSIX); on S3 a PUT is atomic, so the pointer object is simply written last, after everything it
names is complete.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ground.files import write_atomically
from pipeline.errors import SnapshotStoreError

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


class Store(Protocol):
    def list_files(self, uri: str) -> list[str]: ...

    def read_text(self, uri: str) -> str | None: ...

    def replace_text(self, uri: str, text: str) -> None: ...

    def upload(self, local_path: Path, uri: str) -> None: ...

    def remove_tree(self, uri: str) -> None: ...


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *parts])


def is_local(uri: str) -> bool:
    return not _SCHEME.match(uri) or uri.startswith("file://")


def local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


@dataclass(frozen=True)
class LocalStore:
    """A directory on this machine (paths, or file:// URIs)."""

    def list_files(self, uri: str) -> list[str]:
        root = local_path(uri)
        if not root.is_dir():
            return []
        found: list[str] = []
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = sorted(d for d in subfolders if not d.startswith((".", "_")))
            # Hidden and underscore names are temporary files (the sink's, Spark's): never input.
            found.extend(
                str(Path(folder) / name) for name in sorted(files) if not name.startswith((".", "_"))
            )
        return found

    def read_text(self, uri: str) -> str | None:
        try:
            return local_path(uri).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read {uri}: {exc}") from exc

    def replace_text(self, uri: str, text: str) -> None:
        target = local_path(uri)
        try:
            write_atomically(target, text)
        except OSError as exc:
            raise SnapshotStoreError(f"cannot write {uri}: {exc}") from exc

    def upload(self, local_file: Path, uri: str) -> None:
        target = local_path(uri)
        if target.resolve() == local_file.resolve():
            return
        self.replace_bytes(target, local_file.read_bytes())

    def remove_tree(self, uri: str) -> None:
        shutil.rmtree(local_path(uri), ignore_errors=True)

    @staticmethod
    def replace_bytes(target: Path, data: bytes) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)


class HadoopStore:
    """Any URI the Spark session's Hadoop configuration can open (s3:// on EMR, s3a://, hdfs://)."""

    def __init__(self, spark: Any) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, uri: str) -> tuple[Any, Any]:
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        return path.getFileSystem(self._conf), path

    def list_files(self, uri: str) -> list[str]:
        fs, path = self._fs(uri)
        if not fs.exists(path):
            return []
        files = fs.listFiles(path, True)
        found: list[str] = []
        while files.hasNext():
            status = files.next()
            name = str(status.getPath().toString())
            relative = name[len(str(fs.makeQualified(path).toString())) :]
            if not any(part.startswith((".", "_")) for part in relative.split("/") if part):
                found.append(name)
        return sorted(found)

    def read_text(self, uri: str) -> str | None:
        fs, path = self._fs(uri)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            reader = self._jvm.java.io.BufferedReader(self._jvm.java.io.InputStreamReader(stream, "UTF-8"))
            lines = []
            line = reader.readLine()
            while line is not None:
                lines.append(str(line))
                line = reader.readLine()
            return "\n".join(lines)
        finally:
            stream.close()

    def replace_text(self, uri: str, text: str) -> None:
        fs, path = self._fs(uri)
        stream = fs.create(path, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def remove_tree(self, uri: str) -> None:
        fs, path = self._fs(uri)
        if fs.exists(path):
            fs.delete(path, True)

    def upload(self, local_file: Path, uri: str) -> None:
        fs, path = self._fs(uri)
        fs.copyFromLocalFile(False, True, self._jvm.org.apache.hadoop.fs.Path(str(local_file)), path)


def store_for(uri: str, spark: Any) -> Store:
    """The local store for paths and file:// URIs (atomic rename), Hadoop's file systems otherwise."""
    return LocalStore() if is_local(uri) else HadoopStore(spark)


def spark_uri(uri: str) -> str:
    """A URI Spark reads the same way the store does (relative paths made absolute)."""
    if is_local(uri):
        return str(local_path(uri).resolve())
    return uri

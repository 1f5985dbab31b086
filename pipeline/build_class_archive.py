"""Build the class archive of pipeline/class_archive.py: ``python -m pipeline.build_class_archive``
(``make setup`` runs it; ``--force`` builds again).

A fresh interpreter runs a small full rebuild through the product's own path
(:func:`pipeline.snapshot_run.run_snapshot`, then a read of the snapshot) with
``-XX:ArchiveClassesAtExit``, so the archive holds the classes a local run loads; the JVM writes
the file as it exits, and only once it has exited is the file renamed into place, whole.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ground.settings import Settings
from pipeline.class_archive import archive_path
from pipeline.session import build_session
from pipeline.snapshot_run import read_snapshot, run_snapshot

BUILD_TIMEOUT_SECONDS = 900
SHARD = "shardId-00000001"


def _warm_up(archive: Path, work: Path) -> None:
    """In a fresh interpreter: a full rebuild of a three-change log, then the JVM's exit, which
    writes ``archive``. Runs the product's own path so the archive holds the classes it loads."""
    log = work / "changelog" / SHARD / f"{100:040d}-{102:040d}.jsonl.gz"
    log.parent.mkdir(parents=True)
    lines = [_change(100, "INSERT", "a"), _change(101, "MODIFY", "a"), _change(102, "REMOVE", "b")]
    with gzip.open(log, "wt", encoding="utf-8") as out:
        out.write("\n".join(json.dumps(line) for line in lines) + "\n")
    settings = Settings.model_validate(
        {
            "application_name": "class-archive",
            "region": "us-east-1",
            "table": {"name": "warm", "partition_key": {"name": "pk"}},
            "pipeline": {
                "changelog_uri": str(work / "changelog"),
                "snapshot_uri": str(work / "snapshot"),
                "stats_uri": str(work / "stats"),
            },
        }
    )
    spark = build_session(
        "local[2]", "class-archive", extra_java_options=f"-XX:ArchiveClassesAtExit={archive}"
    )
    run_snapshot(spark, settings)
    read_snapshot(spark, settings).count()
    gateway = spark.sparkContext._gateway
    spark.stop()
    process = getattr(gateway, "proc", None)
    if process is not None:  # the JVM writes the archive as it exits: wait for it
        if process.stdin is not None:
            process.stdin.close()
        process.wait(timeout=BUILD_TIMEOUT_SECONDS)


def _change(seq: int, event: str, key: str) -> dict[str, object]:
    """One change line in the change log's format (docs/design.md, "Change log")."""
    keys = {"pk": {"S": key}}
    return {
        "v": 1,
        "table": "warm",
        "shardId": SHARD,
        "parentShardIds": [],
        "eventId": f"warm-{seq}",
        "eventName": event,
        "sequenceNumber": str(seq),
        "approximateCreationDateTime": 1_763_798_400.0,
        "sizeBytes": 40,
        "keys": keys,
        "newImage": None if event == "REMOVE" else {**keys, "n": {"N": str(seq)}},
        "oldImage": None,
        "userIdentity": None,
        "landedAt": 1_763_798_401.5,
    }


def build(*, force: bool = False) -> Path | None:
    """Build this runtime's archive unless it exists; its path, or None when there is no runtime."""
    path = archive_path()
    if path is None:
        return None
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="class-archive-") as work:
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")  # same file system: renamed whole
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.build_class_archive", "--warm-up", str(partial), work],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            check=False,
        )
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            raise RuntimeError(
                f"building the class archive failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
            )
        os.replace(partial, path)  # a JVM starting meanwhile finds no archive or the whole one
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.build_class_archive",
        description="Build the local Spark driver's class archive (pipeline/class_archive.py).",
    )
    parser.add_argument("--force", action="store_true", help="build again even if the archive exists")
    parser.add_argument("--warm-up", nargs=2, metavar=("ARCHIVE", "WORKDIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warm_up:
        _warm_up(Path(args.warm_up[0]), Path(args.warm_up[1]))
        return 0
    path = archive_path()
    existed = path is not None and path.is_file() and not args.force
    built = build(force=args.force)
    if built is None:
        print("no Java runtime found: local Spark JVMs start without a class archive", file=sys.stderr)
        return 1
    print(f"class archive {'up to date' if existed else 'built'}: {built}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

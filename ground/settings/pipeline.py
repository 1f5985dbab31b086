"""The Spark pipeline: where the change log, snapshots and statistics live, and whether the jobs
run on EMR Serverless (which then needs every location on S3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field

from ground.settings.base import SettingsModel


class PipelineSettings(SettingsModel):
    changelog_uri: str = Field("var/changelog", description="Where the changelog sink lands changes.")
    snapshot_uri: str = Field("var/snapshot", description="Where the Spark snapshot versions are written.")
    stats_uri: str = Field("var/stats", description="Where change statistics are written.")
    spark_master: str = Field("local[2]", description="Spark master for local runs.")
    tolerate_bad_lines: int = Field(0, ge=0, description="Malformed change-log lines tolerated per run.")
    rewrite_deleted_share: float = Field(
        0.3,
        gt=0,
        le=1,
        description=(
            "An incremental snapshot run patches a table's bucket (position deletes plus a small data "
            "file) while the rows it has deleted stay below this share of the bucket's rows, and "
            "rewrites it whole at the share (0.3: Iceberg's own delete-ratio threshold for rewriting "
            "a data file). Runs rewrite some buckets ahead of their limits, at the pace the changes "
            "set, so that rewrites come a few a run rather than all in one."
        ),
    )
    max_files_per_bucket: int = Field(
        40,
        ge=8,
        description=(
            "Data and delete files one bucket of a snapshot table (items or tombstones) may hold "
            "before a run rewrites it whole (ahead of the limit, as above): readers open every one."
        ),
    )
    snapshots_kept: int = Field(
        20,
        ge=1,
        description=(
            "Iceberg snapshots each snapshot table keeps (time travel reaches back this many runs); "
            "older ones leave its metadata, which every commit rewrites whole."
        ),
    )
    freshness_seconds: int = Field(
        60,
        ge=10,
        description=(
            "`consumer pipeline follow` keeps the snapshot within this many seconds of the change "
            "log: a change is visible to readers at most this long after DynamoDB made it (its "
            "ApproximateCreationDateTime). On AWS the freshness alarm fires above it."
        ),
    )
    maintenance_interval_minutes: int = Field(
        10,
        ge=1,
        description=(
            "How often `follow` runs a maintenance pass between runs: compaction of every bucket "
            "with patches, tombstone expiry, orphan-file removal (`consumer pipeline maintain` runs "
            "one on demand)."
        ),
    )
    tombstone_retention_hours: float = Field(
        25,
        ge=24,
        description=(
            "A tombstone (a key whose latest change is a REMOVE) is dropped by maintenance once it "
            "is this much older than the last run's listing of the change log: the stream keeps a "
            "change 24 hours, so nothing older can still arrive and be resurrected by its absence."
        ),
    )
    orphan_min_age_hours: float = Field(
        24,
        gt=0,
        description=(
            "Maintenance deletes files that no kept snapshot names once they are this old: longer "
            "than any run takes, so a run's files are never removed before it commits."
        ),
    )
    emr_serverless: bool = Field(
        False,
        description=(
            "Create the EMR Serverless app and its job role (CDK); the URIs above must then be s3://."
        ),
    )
    emr_follow: bool = Field(
        True,
        description=(
            "With emr_serverless: the fleet stack keeps `follow` running on the EMR Serverless "
            "application (a schedule starts an hour-long job every hour, from the archives "
            "`consumer pipeline submit follow --release` uploads) and alarms when "
            "LakeFreshnessSeconds stays above freshness_seconds or stops arriving."
        ),
    )
    changelog_expiration_days: int | None = Field(
        None,
        ge=1,
        description=(
            "CDK: delete change-log objects (under processing.options.destination in the change-log "
            "bucket) this many days after they land, by an S3 lifecycle rule. Default empty: kept, and "
            "the bucket grows by the GB of changes each month (docs/deploy.md, cost). The snapshot keeps "
            "its own state; only a rebuild from the log's start (snapshot --full) needs what expired, and "
            "bootstrap from a table export replaces it."
        ),
    )
    emr_work_uri: str | None = Field(
        None,
        description=(
            "s3:// prefix where `consumer pipeline submit` uploads code and EMR writes job logs "
            "(default: emr/ in the bucket of changelog_uri)."
        ),
    )

    @property
    def emr_work_location(self) -> str | None:
        """Where submit's archives and the job logs go: ``emr_work_uri``, or ``emr`` beside the
        change log in its bucket (the job role may already read that bucket); None off S3."""
        if self.emr_work_uri:
            return self.emr_work_uri.rstrip("/")
        parts = urlsplit(self.changelog_uri)
        if parts.scheme != "s3" or not parts.netloc:
            return None
        return f"s3://{parts.netloc}/emr"


def emr_location_problems(pipeline: PipelineSettings, processing_options: Mapping[str, Any]) -> list[str]:
    """Why these pipeline locations cannot serve EMR Serverless, if they cannot (empty: they can).

    EMR Serverless has no local disk that outlives a job: every pipeline location must be on S3,
    and the change log it reads must be the one the workers write (``processing.options.
    destination``). A function of both sections, so the root model's validator calls it.
    """
    if not pipeline.emr_serverless:
        return []
    destination = processing_options.get("destination")
    bucket = None
    if isinstance(destination, str) and destination.startswith("s3://"):
        bucket = urlsplit(destination).netloc
    locations = {
        "changelog_uri": pipeline.changelog_uri,
        "snapshot_uri": pipeline.snapshot_uri,
        "stats_uri": pipeline.stats_uri,
    }
    if pipeline.emr_work_uri is not None:
        locations["emr_work_uri"] = pipeline.emr_work_uri
    problems = []
    for key, uri in locations.items():
        parts = urlsplit(uri)
        if parts.scheme != "s3" or not parts.netloc:
            example = f"s3://{bucket}/{key.removesuffix('_uri')}" if bucket else "s3://bucket/prefix"
            if key == "changelog_uri" and bucket:
                example = str(destination)
            problems.append(
                f"pipeline.{key} is {uri!r}: with pipeline.emr_serverless it must be an s3:// location "
                f"(e.g. {example})"
            )
    if (
        isinstance(destination, str)
        and destination.startswith("s3://")
        and pipeline.changelog_uri.rstrip("/") != destination.rstrip("/")
        and not problems
    ):
        problems.append(
            f"pipeline.changelog_uri is {pipeline.changelog_uri!r} but the workers write "
            f"processing.options.destination {destination!r}: the jobs would read another place "
            f"(set pipeline.changelog_uri: {destination})"
        )
    return problems

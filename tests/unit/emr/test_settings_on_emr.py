"""With `pipeline.emr_serverless` every pipeline location must be on S3 and the change log the jobs
read must be the one the workers write; each mistake is refused naming the key and a value that
would do. The work prefix (archives, job logs) defaults to emr/ in the change log's bucket."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ground.settings import ConfigError, load_settings

REPO_CONFIG = Path(__file__).resolve().parents[3] / "config"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    shutil.copytree(REPO_CONFIG, tmp_path / "config")
    return tmp_path / "config"


def _prod_with(config: Path, pipeline: str) -> None:
    text = (config / "prod.yaml").read_text()
    (config / "prod.yaml").write_text(text[: text.index("pipeline:")] + pipeline)


def _problems(config: Path) -> str:
    with pytest.raises(ConfigError) as raised:
        load_settings("prod", config)
    return "\n".join(str(p) for p in raised.value.problems)


def test_prod_as_shipped_puts_everything_in_the_change_log_bucket() -> None:
    pipeline = load_settings("prod", REPO_CONFIG).pipeline
    assert pipeline.changelog_uri == "s3://orders-stream-consumer-prod-changelog/changes"
    assert pipeline.emr_work_location == "s3://orders-stream-consumer-prod-changelog/emr"


def test_local_paths_with_emr_are_refused_naming_each_key_and_a_value(config: Path) -> None:
    _prod_with(config, "pipeline:\n  emr_serverless: true\n")
    text = _problems(config)
    assert "prod.yaml" in text
    assert (
        "pipeline.changelog_uri is 'var/changelog': with pipeline.emr_serverless it must be an s3:// "
        "location (e.g. s3://orders-stream-consumer-prod-changelog/changes)"
    ) in text
    assert (
        "pipeline.snapshot_uri is 'var/snapshot'" in text
        and "s3://orders-stream-consumer-prod-changelog/snapshot" in text
    )
    assert "pipeline.stats_uri is 'var/stats'" in text
    assert "(got {" not in text  # not the whole configuration echoed back


def test_reading_another_change_log_than_the_workers_write_is_refused(config: Path) -> None:
    _prod_with(
        config,
        "pipeline:\n  emr_serverless: true\n  changelog_uri: s3://elsewhere/changes\n"
        "  snapshot_uri: s3://elsewhere/snapshot\n  stats_uri: s3://elsewhere/stats\n",
    )
    text = _problems(config)
    assert "pipeline.changelog_uri is 's3://elsewhere/changes' but the workers write" in text
    assert "set pipeline.changelog_uri: s3://orders-stream-consumer-prod-changelog/changes" in text


def test_an_explicit_work_location_wins_and_must_be_on_s3(config: Path) -> None:
    text = (config / "prod.yaml").read_text()
    (config / "prod.yaml").write_text(text + "  emr_work_uri: s3://artifacts-bucket/jobs/\n")
    assert load_settings("prod", config).pipeline.emr_work_location == "s3://artifacts-bucket/jobs"
    (config / "prod.yaml").write_text(text + "  emr_work_uri: var/emr\n")
    assert "pipeline.emr_work_uri is 'var/emr'" in _problems(config)


def test_without_emr_local_paths_stay_fine() -> None:
    settings = load_settings("dev", REPO_CONFIG)
    assert not settings.pipeline.emr_serverless and settings.pipeline.changelog_uri == "var/changelog"
    assert settings.pipeline.emr_work_location is None

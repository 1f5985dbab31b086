"""`consumer pipeline bootstrap --export` refuses an export older than the stream's 24 h retention:
the changes made between the export and the oldest record the stream still holds would be in
neither, silently. The refusal is one line with the way out, before any Spark session starts."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from pipeline.bootstrap import ExportManifest, ExportTooOldError, check_export_age
from tools.cli import main
from tools.commands import ExitCode

REPO = Path(__file__).resolve().parents[3]
HOUR = 3600.0


def test_an_export_within_the_retention_is_accepted_and_an_older_one_refused() -> None:
    exported = 1_800_000_000.0
    manifest = ExportManifest(export_time=exported, data_files=(), item_count=0)
    check_export_age(manifest, "s3://b/AWSDynamoDB/x", now=exported + 23.9 * HOUR)
    with pytest.raises(ExportTooOldError) as refused:
        check_export_age(manifest, "s3://b/AWSDynamoDB/x/", now=exported + 30 * HOUR)
    message = str(refused.value)
    assert message.startswith("s3://b/AWSDynamoDB/x: the export is from 2027-01-15 08:00 UTC, 30 h ago")
    assert "the stream keeps 24 h" in message
    assert (
        "the changes made from 2027-01-15 08:00 UTC until 6 h ago are neither in the export nor still in "
        "the stream, and the snapshot would miss them" in message
    )
    assert "in neither" not in message
    assert "export-table-to-point-in-time" in message and "leave out --export" in message


def write_export(folder: Path, exported_at: dt.datetime) -> Path:
    """A DynamoDB export's folder as AWS writes it (DYNAMODB_JSON, FULL_EXPORT), with no items."""
    folder.mkdir(parents=True)
    summary = {
        "exportTime": exported_at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "exportFormat": "DYNAMODB_JSON",
        "exportType": "FULL_EXPORT",
        "itemCount": 0,
    }
    (folder / "manifest-summary.json").write_text(json.dumps(summary))
    (folder / "manifest-files.json").write_text("")
    return folder


def test_the_command_refuses_an_old_export_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("CONSUMER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CONSUMER_PIPELINE__SNAPSHOT_URI", str(tmp_path / "snapshot"))
    old = write_export(tmp_path / "AWSDynamoDB" / "0170-old", dt.datetime.now(dt.UTC) - dt.timedelta(days=3))
    code = main(
        [
            "pipeline",
            "bootstrap",
            "--env",
            "local",
            "--config-dir",
            str(REPO / "config"),
            "--export",
            str(old),
        ]
    )
    assert code == ExitCode.USAGE
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("env ")]
    assert len(err) == 1 and err[0].startswith(f"error: {old}: the export is from "), err
    assert "72 h ago" in err[0] and "bootstrap from a scan (leave out --export)" in err[0]
    assert not (tmp_path / "snapshot").exists()  # nothing was written

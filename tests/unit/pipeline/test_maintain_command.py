"""`consumer pipeline maintain` prints the pass's line once (the pass says it on its progress)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from pipeline import jobs
from pipeline.maintenance import MaintenanceResult
from tests.pipeline.fixtures import settings_for


def test_maintain_prints_its_line_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def maintain(_tables: Any, _policy: Any, *, progress: Any, **__: Any) -> MaintenanceResult:
        result = MaintenanceResult()
        progress(f"[maintain] {result.line()}")  # as pipeline.maintenance.maintain ends
        return result

    monkeypatch.setattr(jobs, "maintain", maintain)
    monkeypatch.setattr(jobs, "snapshot_tables", lambda settings: object())
    assert jobs.execute(argparse.Namespace(job="maintain"), settings_for(tmp_path), None) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"[maintain] {MaintenanceResult().line()}"]

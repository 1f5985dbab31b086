"""The generated settings table (docs/settings.md) matches the settings models, and the README
points users at it and at the advice instead of unexplained references."""

from __future__ import annotations

import re
from pathlib import Path

from tools.settings_doc import settings_markdown_table

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
SETTINGS_DOC = ROOT / "docs" / "settings.md"


def test_settings_table_is_current() -> None:
    text = SETTINGS_DOC.read_text(encoding="utf-8")
    assert settings_markdown_table() in text, "run: .venv/bin/python scripts/update-readme.py"


def test_every_worker_property_has_a_row() -> None:
    table = settings_markdown_table()
    for key in ("failover_time_millis", "max_leases_for_worker", "initial_lease_table_write_capacity"):
        assert f"`worker.{key}`" in table


def test_readme_links_the_settings_and_has_no_table_of_its_own() -> None:
    text = README.read_text(encoding="utf-8")
    assert "(docs/settings.md)" in text
    assert "settings-table:start" not in text


def test_no_unexplained_seed_references() -> None:
    """Advice is stated with its source, never as "seed 00X" (a name only the authors knew)."""
    documents = [README, *sorted((ROOT / "docs").glob("*.md"))]
    for document in documents:
        found = re.findall(r"seeds? 0\d\d", document.read_text(encoding="utf-8"))
        assert not found, f"{document.name}: {found}"
    assert not re.search(r"seeds? 0\d\d", settings_markdown_table())

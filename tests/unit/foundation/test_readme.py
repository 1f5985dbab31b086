"""The README's generated settings table matches the settings models."""

from __future__ import annotations

from pathlib import Path

from consumer.settings_doc import settings_markdown_table

README = Path(__file__).resolve().parents[3] / "README.md"


def test_settings_table_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert settings_markdown_table() in text, "run: .venv/bin/python scripts/update-readme.py"


def test_every_worker_property_has_a_row() -> None:
    table = settings_markdown_table()
    for key in ("failover_time_millis", "max_leases_for_worker", "initial_lease_table_write_capacity"):
        assert f"`worker.{key}`" in table

"""Regenerate the generated sections of README.md (the settings table)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from consumer.settings_doc import settings_markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- settings-table:start -->", "<!-- settings-table:end -->"

text = README.read_text(encoding="utf-8")
pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
README.write_text(pattern.sub(f"{START}\n{settings_markdown_table()}{END}", text), encoding="utf-8")

"""Regenerate the generated section of docs/settings.md (the settings table).

The table lives in docs/settings.md rather than README.md so that the README reads as a user's
guide; the script's name is the one habits and links know.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.settings_doc import settings_markdown_table

SETTINGS_DOC = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
START, END = "<!-- settings-table:start -->", "<!-- settings-table:end -->"

text = SETTINGS_DOC.read_text(encoding="utf-8")
pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
if not pattern.search(text):
    sys.exit(f"{SETTINGS_DOC} has no {START} ... {END} section")
SETTINGS_DOC.write_text(
    pattern.sub(lambda _: f"{START}\n{settings_markdown_table()}{END}", text), encoding="utf-8"
)
print(f"updated {SETTINGS_DOC}")

"""The house rule: a module of consumer/ imports only its own room and rooms on lower floors.

The rule is data in scripts/house.py (written once); this test reads every import of consumer/
(including imports inside functions) and fails naming each one that reaches sideways or up, and
fails when docs/design.md's picture no longer matches the imports.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _house() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house", ROOT / "scripts" / "house.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("house", module)
    spec.loader.exec_module(module)
    return module


house = _house()


def test_no_module_imports_a_room_beside_or_above_its_own() -> None:
    assert house.violations() == []


def test_every_long_module_says_why() -> None:
    """Modules over ~400 lines are split, or stay long for a reason written in scripts/house.py."""
    assert house.long_modules() == []


def test_every_room_of_consumer_has_a_floor() -> None:
    rooms = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "consumer").iterdir()}
    rooms -= {"__init__", "__main__", "__pycache__", "py"}
    assert sorted(rooms - set(house.FLOOR_OF)) == []
    assert sorted(set(house.FLOOR_OF) - rooms) == []  # no floor for a room that is gone


def test_the_rule_catches_an_import_up_a_floor_and_one_sideways(tmp_path: Path) -> None:
    """The checker itself: a lease module reaching up to the lifecycle, and streams reaching
    sideways to telemetry, are both named; a room importing itself is not."""
    package = tmp_path / "consumer"
    (package / "leases").mkdir(parents=True)
    (package / "streams").mkdir()
    (package / "__init__.py").write_text("")
    (package / "leases" / "__init__.py").write_text("")
    (package / "streams" / "__init__.py").write_text("")
    (package / "leases" / "store.py").write_text(
        "from consumer.leases.model import Lease\n\ndef f():\n    from consumer.lifecycle import ports\n"
    )
    (package / "streams" / "source.py").write_text("from ..telemetry import metrics\n")
    original = house.ROOT
    house.ROOT = tmp_path
    try:
        found = list(house.imports(package))
        problems = house.violations(found)
    finally:
        house.ROOT = original
    assert len(problems) == 2, problems
    assert "consumer/leases/store.py:4" in problems[0] and "a higher floor" in problems[0]
    assert "consumer/streams/source.py:1" in problems[1] and "the same floor" in problems[1]


def test_the_picture_in_docs_design_md_matches_the_imports() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = house.current_section(text)
    assert section is not None, "docs/design.md lost its house markers"
    assert section == house.render(), "run: python scripts/house.py --write"

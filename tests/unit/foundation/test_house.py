"""The house rule: a module imports only its own package (or room) and those on lower floors.

The rule is data in scripts/house.py (written once); this test reads every import of every package
of the repository (including imports inside functions and ``importlib.import_module`` with a literal
name) and fails naming each one that reaches sideways or up, on a package-level loop, on a module
too long without a written reason, and when docs/design.md's pictures no longer match the imports.
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


def test_no_module_imports_a_package_or_room_beside_or_above_its_own() -> None:
    assert house.violations() == []


def test_no_package_level_import_loop() -> None:
    assert house.cycles(list(house.imports())) == []


def test_every_top_level_package_has_a_floor() -> None:
    """Every top-level directory holding Python (tests, node_modules and the like aside) is placed."""
    ignored = {"tests", "node_modules", "cdk.out", "var", "processors", "build"}
    found = {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in ignored and any(p.rglob("*.py"))
    } | {p.stem for p in ROOT.glob("*.py")}
    assert sorted(found - set(house.PACKAGE_FLOOR)) == []


def test_every_long_module_says_why() -> None:
    """Modules over ~400 lines are split, or stay long for a reason written in scripts/house.py."""
    assert house.long_modules() == []


def test_every_room_of_a_package_built_as_rooms_has_a_floor() -> None:
    for package, floors in house.ROOM_FLOOR.items():
        rooms = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / package).iterdir()}
        rooms -= {"__init__", "__main__", "__pycache__", "py"}
        assert sorted(rooms - set(floors)) == [], package
        assert sorted(set(floors) - rooms) == [], package  # no floor for a room that is gone


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
    found = list(house.imports(tmp_path))
    problems = house.violations(found, tmp_path)
    assert len(problems) == 2, problems
    assert "consumer/leases/store.py:4" in problems[0] and "a higher floor" in problems[0]
    assert "consumer/streams/source.py:1" in problems[1] and "the same floor" in problems[1]


def test_the_rule_sees_packages_and_importlib(tmp_path: Path) -> None:
    """Between packages: the emulator reaching up to the tools through importlib, and the pipeline
    reaching sideways to the emulator, are both named; the tools reaching down are not."""
    for package in ("ground", "emulator", "pipeline", "tools"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "emulator" / "engine.py").write_text(
        "import importlib\nfrom ground import clock\n\ndef f():\n    importlib.import_module('tools.cli')\n"
    )
    (tmp_path / "pipeline" / "jobs.py").write_text("from emulator.engine import Engine\n")
    (tmp_path / "tools" / "demo.py").write_text("import emulator.engine\nimport pipeline.jobs\n")
    problems = house.violations(list(house.imports(tmp_path)), tmp_path)
    assert len(problems) == 2, problems
    assert (
        "emulator/engine.py:5" in problems[0]
        and "tools.cli" in problems[0]
        and "a higher floor" in problems[0]
    )
    assert "pipeline/jobs.py:1" in problems[1] and "the same floor" in problems[1]


def test_a_loop_between_packages_is_named() -> None:
    found = [
        house.Import("a.x", Path("a/x.py"), 1, "b.y"),
        house.Import("b.y", Path("b/y.py"), 1, "a.z"),
    ]
    assert house.cycles(found) == [["a", "b", "a"]]


def test_the_picture_in_docs_design_md_matches_the_imports() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = house.current_section(text)
    assert section is not None, "docs/design.md lost its house markers"
    assert section == house.render(), "run: python scripts/house.py --write"

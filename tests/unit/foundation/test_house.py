"""The house rule: a module imports only its own package (or room) and those on lower floors; outside
consumer, only consumer's face; nothing outside tests imports tests; no import loop; no long module.

The rule is data in scripts/house_rules.py (written once); scripts/house.py reads every import of
every package of the repository (including imports inside functions, type-only ones and
``importlib.import_module`` with a literal name) and this test fails naming each one that breaks the
rule, each loop, each module over 400 lines, and docs/design.md's pictures when they no longer match
the imports. Each rule is also fed a small synthetic repository that breaks it, so that a checker
that found nothing could not pass.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def _house() -> ModuleType:
    """scripts/house.py by path, as `python scripts/house.py` runs it before anything is installed."""
    spec = importlib.util.spec_from_file_location("house", ROOT / "scripts" / "house.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("house", module)
    spec.loader.exec_module(module)
    return module


house = _house()


@functools.cache
def _found() -> tuple[Any, ...]:
    """The repository's imports, read once for the tests that judge them (each read parses every
    module of the repository again)."""
    return tuple(house.imports())


def found() -> list[Any]:
    return list(_found())


def test_no_module_imports_a_package_or_room_beside_or_above_its_own() -> None:
    assert house.violations(found()) == []


def test_no_package_level_import_loop() -> None:
    assert house.cycles(found()) == []


def test_every_top_level_package_has_a_floor() -> None:
    """Every top-level directory holding Python (tests, node_modules and the like aside) is placed."""
    ignored = {"tests", "node_modules", "cdk.out", "var", "processors", "build"}
    found = {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in ignored and any(p.rglob("*.py"))
    } | {p.stem for p in ROOT.glob("*.py")}
    assert sorted(found - set(house.PACKAGE_FLOOR)) == []


def test_no_module_outside_consumer_reaches_past_its_face() -> None:
    assert house.face_violations(found()) == []


def test_nothing_outside_tests_imports_tests() -> None:
    assert house.tests_imported(found()) == []


def test_no_module_level_import_loop() -> None:
    """Type-only imports count: a loop of them still ties two modules into one."""
    assert house.module_cycles(found()) == []


def test_no_module_is_over_400_lines() -> None:
    """Tests included, and no list of exceptions."""
    assert house.LONG_MODULE_LINES == 400
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
    assert section == house.render(found()), "run: python scripts/house.py --write"


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_face_rule_names_the_module_the_line_and_the_internal_module(tmp_path: Path) -> None:
    """tools reaching consumer.leases.model (directly, by ``from consumer.leases import model`` and
    inside a function) is named; the face (consumer.api.leases, consumer.processing's re-export that
    shadows a submodule of the same name, consumer itself) is not, nor consumer importing itself."""
    _tree(
        tmp_path,
        {
            "consumer/__init__.py": "",
            "consumer/api/__init__.py": "",
            "consumer/api/leases.py": "from consumer.leases.model import Lease\n",
            "consumer/leases/__init__.py": "",
            "consumer/leases/model.py": "class Lease: ...\n",
            "consumer/processing/__init__.py": "from consumer.processing.factory import function_processor\n",
            "consumer/processing/factory.py": "def function_processor(): ...\n",
            "consumer/processing/function_processor.py": "",
            "tools/__init__.py": "",
            "tools/cli.py": (
                "import consumer\n"
                "from consumer.api.leases import Lease\n"
                "from consumer.processing import function_processor\n"
                "from consumer.leases.model import Lease as Row\n"
                "from consumer.leases import model\n"
                "\n\ndef f():\n    import consumer.leases.model\n"
            ),
        },
    )
    problems = house.face_violations(house.imports(tmp_path), tmp_path)
    assert [p.split(" imports ")[0] for p in problems] == [
        "tools/cli.py:4: tools.cli",
        "tools/cli.py:5: tools.cli",
        "tools/cli.py:9: tools.cli",
    ], problems
    assert all("consumer.leases.model, inside consumer" in p for p in problems), problems


def test_a_package_that_reaches_inside_is_named_in_the_data() -> None:
    """simulation drives consumer's parts as the tests do, and says so; nothing else is let in."""
    assert set(house.REACH_INSIDE) == {"simulation"}
    assert all(why.strip() for why in house.REACH_INSIDE.values())


def test_an_import_of_tests_outside_tests_is_named(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "tests/__init__.py": "",
            "tests/support.py": "",
            "bench/__init__.py": "",
            "bench/run.py": "\n\ndef f():\n    from tests.support import wait_for\n",
            "scripts/check.py": "import importlib\nimportlib.import_module('tests.support')\n",
        },
    )
    problems = house.tests_imported(house.imports(tmp_path), tmp_path)
    assert len(problems) == 2, problems
    assert problems[0].startswith("bench/run.py:4: bench.run imports tests.support"), problems
    assert problems[1].startswith("scripts/check.py:2: scripts.check imports tests.support"), problems


def test_a_module_loop_is_named_type_only_imports_included(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "pipeline/__init__.py": "",
            "pipeline/commit.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pipeline.table import Tables\n"
            ),
            "pipeline/table.py": "from pipeline import commit\n",
            "pipeline/read.py": "from pipeline.table import Tables\n",
        },
    )
    loops = house.module_cycles(house.imports(tmp_path), tmp_path)
    assert loops == [
        "import loop: pipeline.commit (pipeline/commit.py:4) -> pipeline.table (pipeline/table.py:1) "
        "-> pipeline.commit"
    ], loops


def test_a_module_over_400_lines_is_named_whatever_it_is(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "consumer/__init__.py": "",
            "consumer/records.py": "x = 1\n" * 401,
            "consumer/short.py": "x = 1\n" * 400,
            "tests/test_long.py": "x = 1\n" * 500,
        },
    )
    assert house.long_modules(tmp_path) == [
        "consumer/records.py: 401 lines, over 400: split it",
        "tests/test_long.py: 500 lines, over 400: split it",
    ]


def test_the_script_runs_by_path_on_the_standard_library_alone() -> None:
    """`python scripts/house.py` in an interpreter that sees none of the repository's packages nor
    site-packages (-S -I): the pictures it prints are the ones in docs/design.md."""
    done = subprocess.run(
        [sys.executable, "-S", "-I", str(ROOT / "scripts" / "house.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.stdout.strip() == house.render(found()), done.stderr

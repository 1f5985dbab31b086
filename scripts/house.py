"""The house rule's checker: every import of the repository (scripts/house_reader.py reads them)
against the rule's data (scripts/house_rules.py: floors, rooms, consumer's face, sizes).

Two things call it:

* ``tests/unit/foundation/test_house.py`` fails on each import that breaks the rule, naming the
  module, the line and what it reached; on a loop between packages or between modules; on ``tests``
  imported outside tests; on a module too long;
* ``python scripts/house.py --write`` draws the pictures at the top of docs/design.md from the
  imports as they are (scripts/house_pictures.py; the test fails when the page and the code
  disagree, so it cannot drift).

Standard library only, and the three files beside it are loaded by path, so it runs before anything
is installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"


def _beside(name: str) -> ModuleType:
    """scripts/<name>.py, loaded by path: scripts/ is not a package and need not be on sys.path."""
    path = Path(__file__).resolve().with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


rules = _beside("house_rules")
reader = _beside("house_reader")
pictures = _beside("house_pictures")
Import = reader.Import
module_name = reader.module_name
current_section = pictures.current_section
Floors = rules.Floors
PACKAGES: Floors = rules.PACKAGES
ROOMS: dict[str, Floors] = rules.ROOMS
FACE: dict[str, str] = rules.FACE
REACH_INSIDE: dict[str, str] = rules.REACH_INSIDE
TESTS: str = rules.TESTS
LONG_MODULE_LINES: int = rules.LONG_MODULE_LINES
FACE_OF: str = rules.FACE_OF


def _floor_of(floors: Floors) -> dict[str, int]:
    return {name: floor for floor, (_, names) in enumerate(floors) for name in names}


PACKAGE_FLOOR: dict[str, int] = _floor_of(PACKAGES)
ROOM_FLOOR: dict[str, dict[str, int]] = {package: _floor_of(floors) for package, floors in ROOMS.items()}


def package_paths(root: Path | None = None) -> dict[str, list[Path]]:
    """Every package of the rule's data and the Python files it is made of."""
    return reader.package_paths(PACKAGE_FLOOR, root or ROOT)


def imports(root: Path | None = None) -> list[Import]:
    """Every import of one of the repository's packages, or of the tests, by a module of a package."""
    return list(reader.imports(PACKAGE_FLOOR, root or ROOT, also=[TESTS]))


def _reach(source_floor: int, target_floor: int) -> str | None:
    if target_floor < source_floor:
        return None
    return "the same floor" if target_floor == source_floor else "a higher floor"


def _room_problems(imp: Import, base: Path) -> list[str]:
    source = imp.source_package
    floors = ROOM_FLOOR.get(source)
    rooms = (imp.source_room, imp.target_room)
    if floors is None or rooms[1] in {rooms[0], source}:
        return []
    unplaced = [room for room in rooms if room not in floors and room != source]
    if unplaced:
        return [
            f"{imp.path.relative_to(base)}: room {room!r} of {source} has no floor in scripts/house_rules.py"
            for room in unplaced
        ]
    reach = None if rooms[0] == source else _reach(floors[rooms[0]], floors[rooms[1]])
    if reach is None:
        return []
    return [
        f"{imp.where(base)} ({rooms[0]}, floor {floors[rooms[0]]}) imports {imp.target} "
        f"({rooms[1]}, {reach}: {floors[rooms[1]]})"
    ]


def violations(found: list[Import] | None = None, root: Path | None = None) -> list[str]:
    """Each import that reaches a package (or, inside a package built as rooms, a room) on the same or
    a higher floor, its own excepted; and each room the data does not place on a floor."""
    base = root or ROOT
    problems = []
    for imp in found if found is not None else list(imports(base)):
        source, target = imp.source_package, imp.target_package
        if target == TESTS:
            continue  # tests_imported() names these
        if source == target:
            problems += _room_problems(imp, base)
            continue
        reach = _reach(PACKAGE_FLOOR[source], PACKAGE_FLOOR[target])
        if reach:
            problems.append(
                f"{imp.where(base)} ({source}, floor {PACKAGE_FLOOR[source]}) imports {imp.target} "
                f"({target}, {reach}: {PACKAGE_FLOOR[target]})"
            )
    return sorted(set(problems))


def face_violations(found: list[Import] | None = None, root: Path | None = None) -> list[str]:
    """Each import of a consumer module outside its face by a package that is not consumer, and not
    one that :data:`REACH_INSIDE` lets drive consumer's parts."""
    base = root or ROOT
    problems = []
    for imp in found if found is not None else list(imports(base)):
        outside = imp.source_package not in {FACE_OF, *REACH_INSIDE}
        if outside and imp.target_package == FACE_OF and imp.target not in FACE:
            problems.append(
                f"{imp.where(base)} imports {imp.target}, inside {FACE_OF}: import it from "
                f"{FACE_OF}'s face (scripts/house_rules.py FACE)"
            )
    return sorted(set(problems))


def tests_imported(found: list[Import] | None = None, root: Path | None = None) -> list[str]:
    """Each import of the tests by a module outside them."""
    base = root or ROOT
    return sorted(
        {
            f"{imp.where(base)} imports {imp.target}: nothing outside {TESTS}/ imports it (move what it "
            "shares to simulation/ or the product)"
            for imp in (found if found is not None else list(imports(base)))
            if imp.target_package == TESTS
        }
    )


def sized_paths(root: Path | None = None) -> list[Path]:
    base = root or ROOT
    paths = [p for files in package_paths(base).values() for p in files]
    for directory in rules.SIZED_ONLY:
        paths += reader.python_files(base / directory)
    return sorted(paths)


def long_modules(root: Path | None = None) -> list[str]:
    """Every module past :data:`LONG_MODULE_LINES` lines."""
    base = root or ROOT
    problems = []
    for path in sized_paths(base):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > LONG_MODULE_LINES:
            problems.append(
                f"{path.relative_to(base).as_posix()}: {lines} lines, over {LONG_MODULE_LINES}: split it"
            )
    return problems


def package_edges(found: list[Import]) -> set[tuple[str, str]]:
    """Package-to-package imports as they are in the code."""
    return {
        (i.source_package, i.target_package)
        for i in found
        if i.target_package not in {i.source_package, TESTS}
    }


def room_edges(found: list[Import], package: str) -> set[tuple[str, str]]:
    """Room-to-room imports inside ``package`` as they are in the code."""
    return {
        (i.source_room, i.target_room)
        for i in found
        if i.source_package == package == i.target_package
        and i.target_room not in {i.source_room, package}
        and i.source_room != package
    }


def cycles(found: list[Import]) -> list[list[str]]:
    """Package-level import loops (the floors forbid them; this names one if the data were ever
    changed to allow it)."""
    graph: dict[str, set[str]] = {}
    for source, target in package_edges(found):
        graph.setdefault(source, set()).add(target)
    loops: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                loops.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:
                visit(nxt, [*path, nxt])

    for start in sorted(graph):
        visit(start, [start])
    return loops


def module_cycles(found: list[Import], root: Path | None = None) -> list[str]:
    """Module-level import loops, type-only imports included: for each, one shortest way round from
    its first module, each step with the line that makes it."""
    base = root or ROOT
    modules = {module_name(p, base) for paths in package_paths(base).values() for p in paths}
    steps: dict[str, dict[str, Import]] = {}
    for imp in found:
        target = imp.target
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in modules and target != imp.module:
            steps.setdefault(imp.module, {}).setdefault(target, imp)
    loops: list[str] = []
    seen: set[frozenset[str]] = set()
    for start in sorted(steps):
        way = _shortest_way_back(start, steps)
        if way and frozenset(step.module for step in way) not in seen:
            seen.add(frozenset(step.module for step in way))
            links = " -> ".join(f"{step.module} ({step.path.relative_to(base)}:{step.line})" for step in way)
            loops.append(f"import loop: {links} -> {start}")
    return loops


def _shortest_way_back(start: str, steps: dict[str, dict[str, Import]]) -> list[Import]:
    """The imports of the shortest path from ``start`` back to itself (breadth first), or none."""
    came: dict[str, list[Import]] = {start: []}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for target, imp in sorted(steps.get(node, {}).items()):
                if target == start:
                    return [*came[node], imp]
                if target not in came:
                    came[target] = [*came[node], imp]
                    nxt.append(target)
        frontier = nxt
    return []


def problems(root: Path | None = None) -> list[str]:
    """Everything the rule finds wrong, one line each."""
    found = list(imports(root))
    return (
        violations(found, root)
        + face_violations(found, root)
        + tests_imported(found, root)
        + [" -> ".join(loop) for loop in cycles(found)]
        + module_cycles(found, root)
        + long_modules(root)
    )


def render(found: list[Import] | None = None) -> str:
    """The section of docs/design.md between its markers, from the imports as they are."""
    found = found if found is not None else list(imports())
    edges = {package: room_edges(found, package) for package in ROOMS}
    return pictures.render(
        packages=PACKAGES,
        package_edges=package_edges(found),
        rooms=ROOMS,
        room_edges=edges,
        face=FACE,
        reach_inside=REACH_INSIDE,
    )


def write(design: Path = DESIGN) -> bool:
    """Put the rendered section into docs/design.md; True when the file changed."""
    return pictures.write(design, render())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update the pictures in docs/design.md")
    args = parser.parse_args(argv)
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    if args.write:
        print("docs/design.md updated" if write() else "docs/design.md already current")
    else:
        print(render())
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

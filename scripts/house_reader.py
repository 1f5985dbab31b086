"""The house rule's reader: every import a module of the repository makes, read from its source.

Imports are read with :mod:`ast`: ``import`` statements wherever they stand (an import done late, or
only for type checking, is still a dependency) and ``importlib.import_module("name")`` /
``__import__("name")`` with a literal name, which would otherwise hide a dependency from the rule and
from mypy. ``from package import name`` is an import of the submodule ``package.name`` when there is
one and the package does not bind ``name`` itself. Standard library only (scripts/house.py loads it
by path).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    path: Path
    line: int
    target: str  # the imported module, dotted

    @property
    def source_package(self) -> str:
        return self.module.split(".")[0]

    @property
    def target_package(self) -> str:
        return self.target.split(".")[0]

    @property
    def source_room(self) -> str:
        return room_of(self.module)

    @property
    def target_room(self) -> str:
        return room_of(self.target)

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{self.line}: {self.module}"


def room_of(module: str) -> str:
    """consumer.leases.store -> leases; consumer.records -> records; consumer -> consumer (the
    package itself, its ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.py") if "__pycache__" not in p.parts)


def package_paths(packages: Iterable[str], root: Path) -> dict[str, list[Path]]:
    """Each of ``packages`` found under ``root`` (a directory, or a top-level module such as
    ``app``) and the Python files it is made of."""
    base = root
    found: dict[str, list[Path]] = {}
    for package in packages:
        directory, module = base / package, base / f"{package}.py"
        if directory.is_dir():
            found[package] = python_files(directory)
        elif module.is_file():
            found[package] = [module]
    return found


def _literal_import(node: ast.Call) -> str | None:
    """``importlib.import_module("x.y")`` or ``__import__("x.y")`` with a literal name: ``x.y``."""
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in {"import_module", "__import__"}
    )
    if named and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def _is_module(dotted: str, root: Path) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def _bound_in_package(dotted: str, name: str, root: Path) -> bool:
    """Whether the package's ``__init__`` binds ``name`` itself (``consumer.processing`` re-exports
    the function ``function_processor``, which shadows its submodule of that name)."""
    init = root.joinpath(*dotted.split("."), "__init__.py")
    if not init.is_file():
        return False
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound = {node.name}
        elif isinstance(node, ast.Assign):
            bound = {t.id for t in node.targets if isinstance(t, ast.Name)}
        else:
            continue
        if name in bound:
            return True
    return False


def _targets(node: ast.AST, module: str, is_package: bool, root: Path) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.Call):
        literal = _literal_import(node)
        return [literal] if literal else []
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    # ``from consumer import leases`` imports the module consumer.leases; ``from consumer import
    # __version__`` only the package itself.
    return [
        f"{base}.{a.name}"
        if _is_module(f"{base}.{a.name}", root) and not _bound_in_package(base, a.name, root)
        else base
        for a in node.names
    ]


def imports(packages: Iterable[str], root: Path, also: Iterable[str] = ()) -> Iterator[Import]:
    """Every import of one of ``packages`` (or of ``also``: the tests) by a module of one of them."""
    base = root
    files = package_paths(packages, base)
    known = {*files, *also}
    for paths in files.values():
        for path in paths:
            module = module_name(path, base)
            is_package = path.name == "__init__.py"
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                for target in _targets(node, module, is_package, base):
                    if target.split(".")[0] in known:
                        yield Import(module, path, node.lineno, target)

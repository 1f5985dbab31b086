"""Every module of consumer/ imports on its own, in a fresh interpreter (issue 18: an import circle
made ``import consumer.sinks.changelog`` fail unless consumer.processing had been imported first;
a test process that imports everything up front never notices such a circle).

"Fresh" means: none of this repository's modules loaded. Starting a whole interpreter per module
spent nearly all its time importing boto3 and pydantic again, so one interpreter imports the
third-party modules the product uses (found by a first child that imports everything) and forks a
child per module of ours: the child starts with no module of this repository loaded, which is what
an import circle needs to show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_FORKING_IMPORTER = r"""
import importlib, os, sys, traceback
root, names = sys.argv[1], sys.argv[2:]

def ours(module):
    path = getattr(module, "__file__", None) or ""
    return path.startswith(root + os.sep) and os.sep + ".venv" not in path

def in_child(work):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            message, code = work(), 0
        except BaseException:
            message, code = traceback.format_exc().strip().splitlines()[-1], 1
        os.write(write, message.encode())
        os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()

def everything():
    for name in names:
        importlib.import_module(name)
    return "\n".join(k for k, m in list(sys.modules.items()) if m is not None and not ours(m))

code, theirs = in_child(everything)
if code:
    print(f"importing every module at once failed: {theirs}")
    sys.exit(1)
for name in theirs.splitlines():
    try:
        importlib.import_module(name)
    except Exception:
        pass  # a submodule that only imports in its package's context: its package brought it
assert not [k for k, m in list(sys.modules.items()) if m is not None and ours(m)], "ours preloaded"
failed = 0
for name in names:
    code, message = in_child(lambda: importlib.import_module(name) and "")
    if code:
        failed += 1
        print(f"{name}: {message}")
sys.exit(1 if failed else 0)
"""


def modules() -> list[str]:
    found = []
    for path in sorted((ROOT / "consumer").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def import_each_alone(names: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _FORKING_IMPORTER, str(ROOT), *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_every_module_of_consumer_imports_in_a_fresh_interpreter() -> None:
    names = modules()
    assert "consumer.sinks.changelog" in names and len(names) > 50
    result = import_each_alone(names)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_import_circle_is_seen(tmp_path: Path) -> None:
    """The check itself: ``a`` and ``b`` import from each other, which works when ``b`` is imported
    first (as importing everything together does here) and fails when ``a`` is imported alone."""
    package = tmp_path / "circle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circle.b import B\n\nA = B\n")
    (package / "b.py").write_text("B = 2\nfrom circle.a import A  # noqa\n")
    result = subprocess.run(
        [sys.executable, "-c", _FORKING_IMPORTER, str(tmp_path), "circle", "circle.b", "circle.a"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "circle.a: " in result.stdout and "circle.b" not in result.stdout, result.stdout

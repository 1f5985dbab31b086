"""The archives a pipeline job needs on EMR Serverless, built reproducibly from local files.

* **code** (``--py-files``): the modules of ``pipeline`` and ``consumer`` that the job imports,
  found by following the import statements from :data:`ENTRY_MODULE` (so the worker's code, the
  CLI and the emulator stay behind);
* **config** (``spark.archives ...#config``): ``base.yaml`` and the environment's file, which
  ``pipeline.jobs --config-dir ./config`` reads;
* **environment** (``spark.archives ...#environment``): a relocatable CPython of the version this
  project needs (EMR 7.x's own Python is 3.9) with the job's third-party packages unpacked from
  manylinux wheels into its ``site-packages``;
* **entry point**: a two-line script that calls :func:`pipeline.jobs.main`.

Every archive is byte-for-byte the same for the same inputs (sorted members, fixed timestamps and
owners, gzip without a date), so its content hash names it and an unchanged archive is never
uploaded twice.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import io
import re
import shutil
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

FIRST_PARTY = ("ground", "consumer", "pipeline")
ENTRY_MODULE = "pipeline.jobs"
MINIMUM_PYTHON = (3, 11)
# What pipeline/ and the ground/settings package import besides the standard library and PySpark (EMR
# provides PySpark and puts it on the path; a second copy would clash with its JVM side).
# pyiceberg (and pyarrow, which it writes and reads with) registers the snapshot in the Glue catalog.
REQUIREMENTS = ("pydantic", "PyYAML", "boto3", "matplotlib", "pyarrow", "pyiceberg")
# The interpreter in the job's working directory, where Spark unpacks ``...#environment``.
ENVIRONMENT_PYTHON = "./environment/bin/python3"
ENTRY_SCRIPT = b"import sys\n\nfrom pipeline.jobs import main\n\nsys.exit(main())\n"
# 1980-01-01, the earliest time a zip member can carry; tar members get the same.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
FIXED_EPOCH = 315532800
_STANDARD_LIBRARY = re.compile(r"^lib/python(3\.\d+)/")


class PackageError(Exception):
    """An input the archives cannot be built from; the message says which and why."""


@dataclass(frozen=True)
class Artifact:
    """One file to upload: ``name`` is its stable name (``code.zip``), ``path`` the built file."""

    name: str
    path: Path

    @property
    def digest(self) -> str:
        sha = hashlib.sha256()
        with self.path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
        return sha.hexdigest()

    def key(self, prefix: str) -> str:
        """``<prefix>/<stem>-<hash><suffix>``: a new key whenever the content changes."""
        stem, dot, suffix = self.name.partition(".")
        return f"{prefix.strip('/')}/{stem}-{self.digest[:20]}{dot}{suffix}".lstrip("/")


# ------------------------------------------------------------------------------------------ code


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(path: Path, module: str) -> Iterator[str]:
    """Every module an ``import`` in ``path`` may name (``from a import b``: ``a`` and ``a.b``),
    including imports inside functions, which the jobs use for heavy modules."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)


def code_files(
    root: Path, entry: str = ENTRY_MODULE, first_party: tuple[str, ...] = FIRST_PARTY
) -> list[Path]:
    """The files of ``first_party`` packages the entry module needs, relative to ``root``, with every
    package's ``__init__.py`` on the way (an import runs them)."""
    found: dict[str, Path] = {}
    pending = [entry]
    while pending:
        module = pending.pop()
        if module in found or module.split(".")[0] not in first_party:
            continue
        path = _module_file(root, module)
        if path is None:
            if module == entry:
                raise PackageError(f"{entry} not found under {root}: run submit from the repository")
            continue  # ``from a import name``: name is not a module
        found[module] = path
        parts = module.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        pending.extend(_imported_modules(path, module))
    return sorted(path.relative_to(root) for path in found.values())


def _zip_entry(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    archive.writestr(info, data)


def build_code_zip(root: Path, target: Path) -> Artifact:
    """``code.zip`` for ``--py-files``: :func:`code_files`, importable from the zip's root."""
    with zipfile.ZipFile(target, "w") as archive:
        for relative in code_files(root):
            _zip_entry(archive, relative.as_posix(), (root / relative).read_bytes())
    return Artifact("code.zip", target)


def build_config_zip(config_dir: Path, env: str, target: Path) -> Artifact:
    """``config.zip``: ``base.yaml`` (when present) and ``<env>.yaml``; other environments' files
    stay behind (they may name other accounts)."""
    names = [name for name in ("base.yaml", f"{env}.yaml") if (config_dir / name).is_file()]
    if f"{env}.yaml" not in names:
        raise PackageError(f"{config_dir / (env + '.yaml')} does not exist")
    with zipfile.ZipFile(target, "w") as archive:
        for name in names:
            _zip_entry(archive, name, (config_dir / name).read_bytes())
    return Artifact("config.zip", target)


def build_entry_point(target: Path) -> Artifact:
    target.write_bytes(ENTRY_SCRIPT)
    return Artifact("entry.py", target)


# ----------------------------------------------------------------------------------- environment


@dataclass(frozen=True)
class Interpreter:
    """What :func:`inspect_interpreter` learnt of a python-build-standalone ``install_only`` archive."""

    strip: str  # the leading directory of its members ("python/"), removed in the environment
    version: str  # "3.11"

    @property
    def site_packages(self) -> str:
        return f"lib/python{self.version}/site-packages"


def inspect_interpreter(archive: Path) -> Interpreter:
    """The interpreter's layout and version, or a :class:`PackageError` naming what is wrong."""
    try:
        with tarfile.open(archive) as tar:
            names = [m.name + ("/" if m.isdir() else "") for m in tar.getmembers()]
    except (tarfile.TarError, OSError) as exc:
        raise PackageError(f"{archive}: not a readable tar archive ({exc})") from exc
    strip = "python/" if any(name.startswith("python/") for name in names) else ""
    inner = [name.removeprefix(strip) for name in names]
    if "bin/python3" not in inner:
        raise PackageError(
            f"{archive}: no {strip}bin/python3 inside; expected a python-build-standalone "
            "'install_only' archive for Linux"
        )
    versions = sorted({m.group(1) for name in inner if (m := _STANDARD_LIBRARY.match(name))})
    if len(versions) != 1:
        raise PackageError(f"{archive}: cannot tell the Python version (lib/python3.X: {versions or 'none'})")
    major, minor = (int(part) for part in versions[0].split("."))
    if (major, minor) < MINIMUM_PYTHON:
        raise PackageError(
            f"{archive}: Python {versions[0]}, but the pipeline needs "
            f"{'.'.join(map(str, MINIMUM_PYTHON))} or later"
        )
    return Interpreter(strip, versions[0])


def _wheel_members(wheel: Path) -> Iterator[tuple[str, zipfile.ZipInfo]]:
    """(path inside site-packages, member) of a wheel, as an installer lays it out: ``*.data/
    purelib`` and ``platlib`` merge into site-packages; scripts, headers and data are not needed."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            first, _, rest = info.filename.partition("/")
            if first.endswith(".data"):
                scheme, _, inner = rest.partition("/")
                if scheme in ("purelib", "platlib") and inner:
                    yield inner, info
                continue
            yield info.filename, info


def _tar_info(name: str, size: int = 0, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, FIXED_EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build_environment(interpreter: Path, wheels: Iterable[Path], target: Path) -> Artifact:
    """``environment.tar.gz``: the interpreter re-rooted (``bin/python3`` at the top, as
    ``./environment/bin/python3`` once Spark unpacks it) plus every wheel in its site-packages."""
    layout = inspect_interpreter(interpreter)
    wheel_list = sorted(Path(w) for w in wheels)
    if not wheel_list:
        raise PackageError(
            "no wheels given for the environment (the job needs " + ", ".join(REQUIREMENTS) + ")"
        )
    plain = target.with_suffix("")  # the uncompressed tar, gzipped below without a timestamp
    seen: set[str] = set()
    with tarfile.open(interpreter) as source, tarfile.open(plain, "w", format=tarfile.PAX_FORMAT) as out:
        for member in sorted(source.getmembers(), key=lambda m: m.name):
            if layout.strip and not member.name.startswith(layout.strip):
                continue  # the top directory itself ("python")
            name = member.name.removeprefix(layout.strip)
            clean = _tar_info(name, member.size, member.mode)
            clean.type, clean.linkname = member.type, member.linkname
            if member.islnk():
                clean.linkname = member.linkname.removeprefix(layout.strip)
            if member.isfile():
                handle = source.extractfile(member)
                out.addfile(clean, handle)
            else:
                out.addfile(clean)
            seen.add(name)
        for wheel in wheel_list:
            try:
                members = sorted(_wheel_members(wheel), key=lambda pair: pair[0])
                with zipfile.ZipFile(wheel) as archive:
                    for inner, info in members:
                        name = f"{layout.site_packages}/{inner}"
                        if name in seen:
                            continue  # two wheels shipping one file (namespace __init__): keep one
                        data = archive.read(info)
                        mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
                        out.addfile(_tar_info(name, len(data), mode), io.BytesIO(data))
                        seen.add(name)
            except zipfile.BadZipFile as exc:
                raise PackageError(f"{wheel}: not a wheel ({exc})") from exc
    with plain.open("rb") as raw, gzip.GzipFile(target, "wb", mtime=0) as packed:
        shutil.copyfileobj(raw, packed, 1 << 20)
    plain.unlink()
    return Artifact("environment.tar.gz", target)


def archive_members(path: Path) -> list[str]:
    """Member names of a built zip or tar.gz (for ``--dry-run`` listings and tests)."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            return archive.namelist()
    with tarfile.open(path) as tar:
        return tar.getnames()

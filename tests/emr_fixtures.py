"""Offline stand-ins for what ``consumer pipeline submit`` downloads: a python-build-standalone
style interpreter archive and tiny wheels, built in the test (no network, no pip)."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path


def fake_interpreter(path: Path, version: str = "3.11") -> Path:
    """``python/bin/python3`` (a symlink to ``python3.X``, as in the real archives) and
    ``python/lib/python3.X/`` with one standard-library module."""
    with tarfile.open(path, "w:gz") as tar:
        for folder in ("python", "python/bin", "python/lib", f"python/lib/python{version}"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data, mode in (
            (f"python/bin/python{version}", b"#!/bin/sh\necho fake python\n", 0o755),
            (f"python/lib/python{version}/os.py", b"# the standard library\n", 0o644),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("python/bin/python3")
        link.type, link.linkname = tarfile.SYMTYPE, f"python{version}"
        tar.addfile(link)
    return path


def tiny_wheel(folder: Path, name: str = "tinypkg", version: str = "1.0") -> Path:
    """A pure-Python wheel with a package, its dist-info, and one module under ``.data/purelib``
    (which an installer puts in site-packages) and one script under ``.data/scripts`` (which it
    does not)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    dist_info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}/__init__.py", "VALUE = 42\n")
        archive.writestr(f"{name}-{version}.data/purelib/{name}_extra.py", "EXTRA = True\n")
        archive.writestr(f"{name}-{version}.data/scripts/{name}-cli", "#!python\n")
        archive.writestr(
            f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        archive.writestr(
            f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{dist_info}/RECORD", "")
    return wheel

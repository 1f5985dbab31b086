"""The only downloads of ``consumer pipeline submit``: the interpreter and the job's wheels.

Kept apart from :mod:`tools.emr.package`, which builds the environment from files already on
disk, so the build is tested without a network and these two functions are the whole of what
reaches out. Both cache under ``var/emr-build`` and do nothing when the files are already there.

Facts relied on (docs/pipeline.md, "On EMR Serverless"): EMR Serverless 7.x images run Amazon
Linux 2023 (glibc 2.34) whose Python is 3.9; an application is X86_64 unless created as ARM64.
A python-build-standalone ``install_only`` build is relocatable and needs glibc 2.17 or later;
manylinux2014 (glibc 2.17) and manylinux_2_28 wheels run on glibc 2.34.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tools.emr.package import REQUIREMENTS, PackageError

PYTHON_VERSION = "3.11"
# python-build-standalone release and CPython version of the default interpreter; --python-dist
# takes another URL or a local file.
STANDALONE_RELEASE = "20241016"
STANDALONE_PYTHON = "3.11.10"
STANDALONE_URL = (
    "https://github.com/astral-sh/python-build-standalone/releases/download/"
    "{release}/cpython-{version}+{release}-{triple}-install_only.tar.gz"
)
TRIPLES = {"X86_64": "x86_64-unknown-linux-gnu", "ARM64": "aarch64-unknown-linux-gnu"}
WHEEL_PLATFORMS = {
    "X86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64"),
    "ARM64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64", "manylinux_2_34_aarch64"),
}


def interpreter_url(architecture: str) -> str:
    """The default interpreter for an application of ``architecture`` (X86_64 or ARM64)."""
    if architecture not in TRIPLES:
        raise PackageError(f"EMR architecture {architecture!r}: expected one of {', '.join(TRIPLES)}")
    return STANDALONE_URL.format(
        release=STANDALONE_RELEASE, version=STANDALONE_PYTHON, triple=TRIPLES[architecture]
    )


def download_interpreter(source: str, cache: Path) -> Path:
    """A local copy of the interpreter archive at ``source`` (a URL, or a path returned as is)."""
    if "://" not in source:
        path = Path(source)
        if not path.is_file():
            raise PackageError(f"--python-dist {source}: no such file")
        return path
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / source.rsplit("/", 1)[-1]
    if target.is_file():
        return target
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(source, timeout=120) as response, partial.open("wb") as out:
            while block := response.read(1 << 20):
                out.write(block)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise PackageError(f"cannot download the interpreter {source}: {exc}") from exc
    partial.replace(target)
    return target


def pip_download_command(
    destination: Path,
    architecture: str,
    *,
    requirements: Sequence[str] = REQUIREMENTS,
    constraints: Path | None = None,
    python_version: str = PYTHON_VERSION,
) -> list[str]:
    """``pip download`` of binary wheels for the application's platform and Python, not this
    machine's (so it works from a Mac or an arm64 laptop too)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
    for platform in WHEEL_PLATFORMS[architecture]:
        command += ["--platform", platform]
    command += ["--python-version", python_version, "--implementation", "cp", "--dest", str(destination)]
    if constraints is not None and constraints.is_file():
        command += ["--constraint", str(constraints)]
    return [*command, *requirements]


def download_wheels(destination: Path, architecture: str, constraints: Path | None) -> list[Path]:
    """The job's wheels (:data:`tools.emr.package.REQUIREMENTS` and their dependencies, at the
    versions ``requirements.txt`` pins) in ``destination``."""
    if architecture not in WHEEL_PLATFORMS:
        raise PackageError(f"EMR architecture {architecture!r}: expected one of {', '.join(WHEEL_PLATFORMS)}")
    destination.mkdir(parents=True, exist_ok=True)
    command = pip_download_command(destination, architecture, constraints=constraints)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PackageError(f"pip download failed ({' '.join(command[3:])}):\n{result.stderr.strip()}")
    return sorted(destination.glob("*.whl"))

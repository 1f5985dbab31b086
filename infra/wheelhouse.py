"""The locked wheelhouse that ships in the CDK asset, so an instance installs without an index.

Installing the runtime packages from PyPI at boot would take them unhashed, through the NAT, and
as PyPI serves them that minute. So the asset carries every wheel the worker needs, built for the
instance's platform (Amazon Linux 2023, CPython 3.11, manylinux x86_64 or aarch64 by the configured
instance type), and the instance installs them with ``--no-index --require-hashes``: what runs is
byte for byte what ``deploy/requirements.lock`` names.

* :func:`write_lock` (``python -m infra.wheelhouse lock``, needs PyPI) resolves the runtime
  packages at the pins of ``requirements.txt`` for both architectures and writes the lock with a
  hash per wheel;
* :func:`fetch` (``python -m infra.wheelhouse fetch``, ``make wheelhouse``) downloads the lock's
  wheels for one architecture into ``var/wheels/<lock digest>-<arch>/``; a later synth reuses that
  directory and needs no network, and a new lock gets a new directory;
* :func:`infra.product_wheel.build_product_wheel` writes the product's own wheel beside them;
* :func:`stage_asset` assembles the asset directory the fleet uploads.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.errors import InfraConfigError
from infra.product_wheel import RUNTIME_PACKAGES, build_product_wheel, project_identity

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
LOCK_PATH = Path("deploy") / "requirements.lock"
# Where downloaded wheels are kept between synths (overridable for CI caches).
CACHE_VARIABLE = "CONSUMER_WHEEL_CACHE"
DEFAULT_CACHE = REPOSITORY_ROOT / "var" / "wheels"
# The asset's directory of wheels, and the requirements file the instance installs from.
WHEELHOUSE_DIR = "wheelhouse"
INSTALL_FILE = "install.txt"
ARCHITECTURES = ("x86_64", "aarch64")
# Amazon Linux 2023 has glibc 2.34; pip does not widen a manylinux tag by itself, so every older
# policy a wheel may be tagged with is listed.
_MANYLINUX = ("manylinux_2_34", "manylinux_2_28", "manylinux_2_17", "manylinux2014")
PYTHON_VERSION = "3.11"


@dataclass(frozen=True)
class LockedRequirement:
    """One line of the lock: a pinned distribution and the hashes of its allowed wheels."""

    name: str
    version: str
    hashes: tuple[str, ...]


def normalize(name: str) -> str:
    """PEP 503 name normalization (``PyYAML`` and ``pyyaml`` are one project)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def platform_arguments(architecture: str) -> list[str]:
    """``pip download`` options selecting CPython 3.11 wheels for one Linux architecture."""
    if architecture not in ARCHITECTURES:
        raise InfraConfigError(f"no wheelhouse for architecture {architecture!r}: one of {ARCHITECTURES}")
    platforms = [arg for tag in _MANYLINUX for arg in ("--platform", f"{tag}_{architecture}")]
    return [
        "--only-binary=:all:",
        *platforms,
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--abi",
        "cp311",
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]


def pip_environment() -> dict[str, str]:
    """The current environment without the machine's pip configuration (its extra indexes and
    find-links): the wheelhouse comes from PyPI or the lock's cache, nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _pip(arguments: Sequence[str]) -> None:
    command = [sys.executable, "-m", "pip", *arguments]
    result = subprocess.run(
        command, env=pip_environment(), capture_output=True, text=True, timeout=900, check=False
    )
    if result.returncode != 0:
        raise InfraConfigError(
            f"pip failed ({' '.join(command[3:6])} ...):\n{(result.stdout + result.stderr)[-3000:]}"
        )


def _wheel_identity(filename: str) -> tuple[str, str]:
    """(normalized name, version) from a wheel's file name."""
    name, version = filename.split("-")[:2]
    return normalize(name), version


def read_lock(path: Path) -> list[LockedRequirement]:
    """The lock's requirements (``name==version --hash=sha256:...`` with continuation lines)."""
    text = path.read_text().replace("\\\n", " ")
    requirements = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split()
        name, version = spec.split("==")
        hashes = tuple(o.removeprefix("--hash=sha256:") for o in options if o.startswith("--hash=sha256:"))
        requirements.append(LockedRequirement(normalize(name), version, hashes))
    return requirements


def format_lock(requirements: Iterable[LockedRequirement]) -> str:
    header = [
        "# The instance's runtime packages, one hash per allowed wheel (manylinux x86_64 and aarch64,",
        "# CPython 3.11). Generated from requirements.txt's pins by: .venv/bin/python -m infra.wheelhouse lock",
        "# Installed on instances with pip --no-index --require-hashes (deploy/bootstrap.py).",
    ]
    lines = list(header)
    for requirement in sorted(requirements, key=lambda r: r.name):
        lines.append(f"{requirement.name}=={requirement.version} \\")
        hashes = sorted(requirement.hashes)
        for index, digest in enumerate(hashes):
            lines.append(f"    --hash=sha256:{digest}" + (" \\" if index < len(hashes) - 1 else ""))
    return "\n".join(lines) + "\n"


def write_lock(repository: Path = REPOSITORY_ROOT) -> Path:
    """Resolve the runtime packages at ``requirements.txt``'s pins for both architectures (PyPI)."""
    found: dict[tuple[str, str], set[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for architecture in ARCHITECTURES:
            target = Path(scratch) / architecture
            _pip(
                [
                    "download",
                    "--quiet",
                    *platform_arguments(architecture),
                    "-d",
                    str(target),
                    "-c",
                    str(repository / "requirements.txt"),
                    *RUNTIME_PACKAGES,
                ]
            )
            for wheel in target.glob("*.whl"):
                found.setdefault(_wheel_identity(wheel.name), set()).add(sha256_of(wheel))
    lock = repository / LOCK_PATH
    lock.write_text(
        format_lock(LockedRequirement(name, version, tuple(h)) for (name, version), h in found.items())
    )
    return lock


def lock_digest(lock: Path) -> str:
    return hashlib.sha256(lock.read_bytes()).hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_VARIABLE) or DEFAULT_CACHE)


def fetch(lock: Path, architecture: str, cache: Path | None = None) -> Path:
    """The directory holding the lock's wheels for ``architecture``, downloaded once per lock.

    A directory is only used once complete (downloaded into a scratch directory, every file's hash
    checked against the lock, then renamed), so an interrupted download is never half-reused.
    """
    root = cache or cache_root()
    directory = root / f"{lock_digest(lock)}-{architecture}"
    if directory.is_dir():
        return directory
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=root))
    try:
        try:
            _pip(
                [
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--require-hashes",
                    *platform_arguments(architecture),
                    "-d",
                    str(scratch),
                    "-r",
                    str(lock),
                ]
            )
        except InfraConfigError as exc:
            raise InfraConfigError(
                f"cannot build the {architecture} wheelhouse of {lock} (the first synth after a lock change "
                f"downloads it from PyPI into {root}; `make wheelhouse` does it ahead): {exc}"
            ) from exc
        check_wheels(lock, scratch)
        scratch.rename(directory)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)
    return directory


def check_wheels(lock: Path, directory: Path) -> None:
    """Every locked requirement has exactly one wheel here, and its hash is one the lock allows."""
    locked = {r.name: r for r in read_lock(lock)}
    seen: set[str] = set()
    for wheel in sorted(directory.glob("*.whl")):
        name, version = _wheel_identity(wheel.name)
        requirement = locked.get(name)
        if requirement is None or requirement.version != version:
            raise InfraConfigError(f"{wheel.name} is not in {lock}")
        if sha256_of(wheel) not in requirement.hashes:
            raise InfraConfigError(f"{wheel.name}: its hash is not the one {lock} allows")
        seen.add(name)
    missing = sorted(set(locked) - seen)
    if missing:
        raise InfraConfigError(f"no wheel for {missing} in {directory}")


# ---------------------------------------------------------------------------------- the asset


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def write_wheelhouse(source: Path, architecture: str, destination: Path, cache: Path | None = None) -> Path:
    """``destination`` filled with the locked wheels for ``architecture``, the product's wheel and
    ``install.txt``: the lock plus the product wheel's own hash, so one ``--require-hashes``
    install covers everything."""
    lock = source / LOCK_PATH
    if not lock.is_file():
        raise InfraConfigError(f"{lock} is missing: run `.venv/bin/python -m infra.wheelhouse lock`")
    destination.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(fetch(lock, architecture, cache).glob("*.whl")):
        _link_or_copy(wheel, destination / wheel.name)
    product = build_product_wheel(source, destination)
    name, version, _ = project_identity(source)
    install = lock.read_text() + f"{normalize(name)}=={version} \\\n    --hash=sha256:{sha256_of(product)}\n"
    (destination / INSTALL_FILE).write_text(install)
    return destination


_STAGED: list[Path] = []


def _remove_staged() -> None:
    for directory in _STAGED:
        shutil.rmtree(directory, ignore_errors=True)


def stage_asset(
    source: Path,
    include: Sequence[str],
    never: Sequence[str],
    architecture: str,
    *,
    files: Mapping[str, bytes] | None = None,
    cache: Path | None = None,
) -> Path:
    """A directory holding ``include`` from ``source`` (without ``never``), ``files`` (relative
    path -> content) and the wheelhouse.

    CDK fingerprints and copies it into the cloud assembly during synth; it is removed when this
    process exits.
    """
    staged = Path(tempfile.mkdtemp(prefix="consumer-asset-"))
    if not _STAGED:
        atexit.register(_remove_staged)
    _STAGED.append(staged)
    ignore = shutil.ignore_patterns(*(pattern.rstrip("/") for pattern in never))
    for name in include:
        path = source / name
        if path.is_dir():
            shutil.copytree(path, staged / name, ignore=ignore)
        elif path.is_file():
            shutil.copyfile(path, staged / name)
    for relative, content in (files or {}).items():
        target = staged / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    write_wheelhouse(source, architecture, staged / WHEELHOUSE_DIR, cache)
    return staged


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.wheelhouse", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("lock", help="resolve the runtime packages and write deploy/requirements.lock")
    fetch_parser = commands.add_parser("fetch", help="download the lock's wheels into the cache")
    fetch_parser.add_argument("--arch", choices=ARCHITECTURES, action="append")
    args = parser.parse_args(argv)
    try:
        if args.command == "lock":
            print(write_lock())
        else:
            for architecture in args.arch or ["x86_64"]:
                print(fetch(REPOSITORY_ROOT / LOCK_PATH, architecture))
    except InfraConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The product's own wheel: the packages an instance runs of ours, byte-reproducibly.

Fixed timestamps and order, so the asset's hash moves only when code or dependencies do; and a
package the console script needs that is missing from the source is a build error naming it,
not instances that fail to import it after boot.
"""

from __future__ import annotations

import base64
import hashlib
import re
import tomllib
import zipfile
from pathlib import Path

from infra.errors import InfraConfigError

# Imported at run time by the worker, and by the Lambda handlers it runs (Powertools, the library
# most of them are written with); the lock holds these and their dependencies, nothing else.
RUNTIME_PACKAGES = (
    "boto3",
    "pydantic",
    "PyYAML",
    "orjson",
    "msgspec",
    "rich",
    "watchtower",
    "aws-embedded-metrics",
    "aws-lambda-powertools",
)
# Zip entries get this timestamp: a wheel built twice from the same files is the same bytes.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)

# What an instance runs of ours: the fleet, the ground floor it stands on, and the ``consumer`` command
# (the tools; their emulator and pipeline parts are imported only by commands an instance never runs).
PRODUCT_PACKAGES = ("ground", "consumer", "tools")


def project_identity(source: Path) -> tuple[str, str, dict[str, str]]:
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    return str(project["name"]), str(project["version"]), dict(project.get("scripts", {}))


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_product_wheel(
    source: Path, destination: Path, packages: tuple[str, ...] = PRODUCT_PACKAGES
) -> Path:
    """A pure-Python wheel of ``packages`` (their ``.py`` files), the same bytes for the same sources.

    Written here rather than by setuptools: the project's build would also pack ``infra``,
    ``emulator`` and ``pipeline``, which instances never run, and stamps the build time into the zip.
    """
    name, version, scripts = project_identity(source)
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    files: list[tuple[str, bytes]] = []
    missing = [package for package in packages if not (source / package / "__init__.py").is_file()]
    if missing:
        raise InfraConfigError(
            f"the product wheel needs the packages {', '.join(missing)} under {source}; "
            "instances would fail to import them"
        )
    for package in packages:
        for path in sorted((source / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                files.append((path.relative_to(source).as_posix(), path.read_bytes()))
    requires = "".join(f"Requires-Dist: {p}\n" for p in RUNTIME_PACKAGES)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.11\n{requires}"
    wheel_meta = "Wheel-Version: 1.0\nGenerator: infra.wheelhouse\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entry_points = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(scripts.items()))
    files += [
        (f"{info}/METADATA", metadata.encode()),
        (f"{info}/WHEEL", wheel_meta.encode()),
        (f"{info}/entry_points.txt", entry_points.encode()),
    ]
    record = "".join(_record_line(n, d) + "\n" for n, d in files) + f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode()))
    destination.mkdir(parents=True, exist_ok=True)
    wheel = destination / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for entry, data in files:
            item = zipfile.ZipInfo(entry, date_time=FIXED_TIME)
            item.external_attr = 0o644 << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(item, data)
    return wheel

"""Snapshot versions and the pointer that names the current one.

Layout under ``snapshot_uri``::

    versions/000001/items/        Parquet: the snapshot (what readers query)
    versions/000001/tombstones/   Parquet: keys whose latest change is a REMOVE
    versions/000001/manifest.json watermarks per shard and the run's counts
    CURRENT                       {"version": "000001", ...}: switched last, atomically

A run writes a complete new version and only then replaces ``CURRENT``; a reader that follows the
pointer never sees a half-written version, and a run that fails leaves the pointer — and so the
snapshot — unchanged (its partial version directory is overwritten by the next run).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.errors import SnapshotStoreError
from pipeline.storage import Store, join

POINTER = "CURRENT"


@dataclass(frozen=True)
class Manifest:
    version: str
    watermarks: dict[str, str]
    counts: dict[str, int] = field(default_factory=dict)
    created_at: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        try:
            data: dict[str, Any] = json.loads(text)
            return cls(
                version=str(data["version"]),
                watermarks={str(k): str(v) for k, v in data["watermarks"].items()},
                counts={str(k): int(v) for k, v in data.get("counts", {}).items()},
                created_at=str(data.get("created_at", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SnapshotStoreError(f"{where} is not a snapshot manifest: {exc}") from exc


class SnapshotCatalog:
    """Reads and switches the pointer of the snapshot at ``root``."""

    def __init__(self, store: Store, root: str) -> None:
        self._store = store
        self.root = root.rstrip("/")

    def version_uri(self, version: str) -> str:
        return join(self.root, "versions", version)

    def items_uri(self, version: str) -> str:
        return join(self.version_uri(version), "items")

    def tombstones_uri(self, version: str) -> str:
        return join(self.version_uri(version), "tombstones")

    def current(self) -> Manifest | None:
        """The manifest the pointer names, or None before the first run."""
        pointer_uri = join(self.root, POINTER)
        text = self._store.read_text(pointer_uri)
        if text is None:
            return None
        try:
            version = str(json.loads(text)["version"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotStoreError(f"{pointer_uri} is not a snapshot pointer: {exc}") from exc
        manifest_uri = join(self.version_uri(version), "manifest.json")
        manifest_text = self._store.read_text(manifest_uri)
        if manifest_text is None:
            raise SnapshotStoreError(f"{pointer_uri} names version {version}, but {manifest_uri} is missing")
        return Manifest.from_json(manifest_text, manifest_uri)

    @staticmethod
    def next_version(current: Manifest | None) -> str:
        return f"{(int(current.version) if current else 0) + 1:06d}"

    def commit(self, manifest: Manifest) -> None:
        """Write the version's manifest, then switch the pointer to it (the pointer goes last)."""
        self._store.replace_text(
            join(self.version_uri(manifest.version), "manifest.json"), manifest.to_json()
        )
        pointer = json.dumps({"version": manifest.version, "items": self.items_uri(manifest.version)})
        self._store.replace_text(join(self.root, POINTER), pointer)

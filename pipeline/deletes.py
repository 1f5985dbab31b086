"""Iceberg position deletes: write the delete files and commit them with new data files, atomically.

An incremental run that changes a few keys of a large bucket should not rewrite the bucket: it
marks the old rows of the changed keys deleted — a *position delete file* lists ``(file_path,
pos)`` pairs, the row's data file and its 0-based row number — and adds the new rows in a new data
file. Every Iceberg reader (Spark, Trino, Athena, DuckDB through PyIceberg, PyIceberg itself)
applies position deletes; equality deletes would spare the run even the lookup of the old rows, but
PyIceberg cannot read them, so the table would stop being readable by one of its readers.

PyIceberg 0.12 reads position deletes but has no public API to *commit* them: its snapshot producers
write every manifest as a data manifest. :class:`RowDelta` is the one producer this product needs —
in one snapshot it removes whole files (data or delete files of buckets rewritten copy-on-write),
adds data files and adds position delete files, writing the latter into a manifest whose content is
``deletes`` (Iceberg table spec, format version 2). It relies on PyIceberg's snapshot-producer
internals, which is why ``pyiceberg`` is pinned exactly and ``tests/pipeline/test_position_deletes.py``
checks the result through PyIceberg's own reader and DuckDB.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import Record

from pipeline.errors import SnapshotStoreError

PATH_FIELD_ID = 2147483546  # Iceberg spec: the reserved field ids of a position delete file
POS_FIELD_ID = 2147483545
POSITION_DELETE_ARROW = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(PATH_FIELD_ID)}),
        pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_FIELD_ID)}),
    ]
)


MERGE_MANIFESTS_AT = 8  # untouched manifests of one content and spec a commit carries as they are


def _names_no_live_file(manifest: ManifestFile) -> bool:
    """True for a manifest of DELETED entries only (its counts say so: no need to read it)."""
    added, existing = manifest.added_files_count, manifest.existing_files_count
    return added is not None and existing is not None and added + existing == 0


class _DeleteManifestWriter(ManifestWriterV2):
    """A version-2 manifest whose entries are delete files (``content = deletes``)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def read_position_deletes(table: Any, paths: Iterable[str]) -> pa.Table:
    """The (data file, position) rows of position delete files, read through the table's file IO."""
    parts = [POSITION_DELETE_ARROW.empty_table()]
    for path in paths:
        try:
            with table.io.new_input(path).open() as stream:
                data = pq.read_table(stream, columns=["file_path", "pos"])
            parts.append(data.cast(POSITION_DELETE_ARROW))
        except (OSError, ValueError) as exc:  # missing, unreadable, or not a position delete file
            raise SnapshotStoreError(f"cannot read the snapshot's delete file {path}: {exc}") from exc
    return pa.concat_tables(parts)


def write_position_deletes(table: Any, folder: str, bucket: int, positions: pa.Table) -> DataFile | None:
    """One position delete file for one partition (``_bucket = bucket``) of ``table``, through the
    table's own file IO (local disk or S3); each row once, sorted by path, then position, as the
    spec asks. Arrow does the sorting: a bucket's folded deletes grow run after run, and as Python
    tuples (``sorted(set(...))``, then back to Arrow) they cost 0.1 to 0.25 s per 100 000 here,
    about half as much again as Arrow's ``group_by`` and ``sort_by``.

    The path bounds are recorded, so readers skip the file for data files it does not name. Returns
    None when there is nothing to delete.
    """
    if positions.num_rows == 0:
        return None
    data = (
        positions.group_by(["file_path", "pos"])
        .aggregate([])
        .sort_by([("file_path", "ascending"), ("pos", "ascending")])
        .select(["file_path", "pos"])
        .cast(POSITION_DELETE_ARROW)
    )
    buffer = io.BytesIO()
    pq.write_table(data, buffer, compression="zstd")
    location = f"{folder.rstrip('/')}/delete-b{bucket}-{uuid.uuid4().hex}.parquet"
    payload = buffer.getvalue()
    with table.io.new_output(location).create(overwrite=True) as out:
        out.write(payload)
    spec = table.metadata.spec()
    paths = data.column("file_path")
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(bucket),
        record_count=data.num_rows,
        file_size_in_bytes=len(payload),
        lower_bounds={PATH_FIELD_ID: paths[0].as_py().encode()},
        upper_bounds={PATH_FIELD_ID: paths[-1].as_py().encode()},
        spec_id=spec.spec_id,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
    )


# A parent's manifests by (content, partition spec): the entries of each that names a removed file,
# and the manifests (with their entries) that name none.
_Touched = dict[tuple[ManifestContent, int], list[list[ManifestEntry]]]
_Untouched = dict[tuple[ManifestContent, int], list[tuple[ManifestFile, list[ManifestEntry]]]]


class RowDelta(_SnapshotProducer["RowDelta"]):
    """One OVERWRITE snapshot: remove whole files, add data files, add position delete files.

    Use inside a PyIceberg transaction, as its own producers are used::

        with RowDelta(tx, removed=paths, added=data_files, deletes=delete_files, properties=...):
            pass
    """

    def __init__(
        self,
        transaction: Any,
        *,
        removed: Iterable[str],
        added: Sequence[DataFile],
        deletes: Sequence[DataFile],
        properties: dict[str, str],
        merge_manifests_at: int = MERGE_MANIFESTS_AT,
    ) -> None:
        super().__init__(
            Operation.OVERWRITE, transaction, transaction._table.io, snapshot_properties=properties
        )
        self._removed_paths = set(removed)
        self._new_data = list(added)
        self._new_deletes = list(deletes)
        self._added_data_files = [*self._new_data, *self._new_deletes]  # counted in the summary
        self._merge_at = merge_manifests_at

    def _existing_manifests(self) -> list[ManifestFile]:
        return []  # unused: _manifests is written whole below

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _writer(self, content: ManifestContent, spec_id: int | None = None) -> ManifestWriter:
        """A manifest of ``content`` under the partition spec ``spec_id`` (default: the current one;
        a rewritten or merged manifest keeps the spec its entries were written with)."""
        metadata = self._transaction.table_metadata
        if metadata.format_version != 2:
            raise SnapshotStoreError(
                f"position deletes need an Iceberg format-version 2 table, not {metadata.format_version}"
            )
        spec = metadata.spec() if spec_id is None else metadata.specs()[spec_id]
        kind = _DeleteManifestWriter if content == ManifestContent.DELETES else ManifestWriterV2
        return kind(spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)

    def _manifests(self) -> list[ManifestFile]:
        """The parent's manifests, those naming a removed file rewritten without it (the file kept
        as a DELETED entry, as the spec asks), then one manifest of new data and one of new deletes.

        Manifests that name no live file (only the DELETED entries of an earlier commit, which that
        commit's snapshot keeps) are dropped, and once more than ``merge_manifests_at``
        (:data:`MERGE_MANIFESTS_AT`; a maintenance pass asks for 1) untouched manifests of one
        content and partition spec remain they are merged into one:
        every scan and every commit reads every manifest, and a run adds two or three, so without
        either a table's planning would slow down run after run. A maintenance pass (1) writes
        one manifest per content and spec (:meth:`_one_per_content`)."""
        self._deleted_data_files = set()
        metadata = self._transaction.table_metadata
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        touched: _Touched = {}
        untouched: _Untouched = {}
        for manifest in parent.manifests(io=self._io) if parent is not None else []:
            if _names_no_live_file(manifest):
                continue
            entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True)
            group = (manifest.content, manifest.partition_spec_id)
            if any(e.data_file.file_path in self._removed_paths for e in entries):
                touched.setdefault(group, []).append(entries)
            else:
                untouched.setdefault(group, []).append((manifest, entries))
        found: set[str] = set()
        if self._merge_at <= 1:
            manifests = self._one_per_content(touched, untouched, found)
        else:
            manifests = self._rewritten(touched, untouched, found)
        if missing := self._removed_paths - found:
            raise SnapshotStoreError(f"files to remove are not in the table: {sorted(missing)[:3]}")
        return manifests

    def _entry(self, writer: ManifestWriter, entry: ManifestEntry, found: set[str]) -> None:
        """``entry`` into ``writer``: as DELETED if this commit removes its file, else as EXISTING."""
        if entry.data_file.file_path in self._removed_paths:
            found.add(entry.data_file.file_path)
            self._deleted_data_files.add(entry.data_file)
            writer.delete(entry)
        else:
            writer.existing(entry)

    def _new_files(self) -> list[tuple[ManifestContent, list[DataFile]]]:
        return [
            (content, files)
            for content, files in (
                (ManifestContent.DATA, self._new_data),
                (ManifestContent.DELETES, self._new_deletes),
            )
            if files
        ]

    def _added(self, writer: ManifestWriter, files: list[DataFile]) -> None:
        for data_file in files:
            writer.add(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id, data_file=data_file
                )
            )

    def _rewritten(
        self,
        touched: _Touched,
        untouched: _Untouched,
        found: set[str],
    ) -> list[ManifestFile]:
        """A run's commit: each manifest naming a removed file rewritten without it, the others
        carried (merged once there are more than ``merge_manifests_at`` of one content and spec),
        then one manifest of new data and one of new deletes."""
        manifests: list[ManifestFile] = []
        for (content, spec_id), groups in touched.items():
            for entries in groups:
                with self._writer(content, spec_id) as writer:
                    for entry in entries:
                        self._entry(writer, entry, found)
                manifests.append(writer.to_manifest_file())
        for (content, spec_id), kept in untouched.items():
            if len(kept) <= self._merge_at:
                manifests.extend(manifest for manifest, _ in kept)
                continue
            with self._writer(content, spec_id) as writer:
                for _, entries in kept:
                    for entry in entries:
                        writer.existing(entry)
            manifests.append(writer.to_manifest_file())
        for content, files in self._new_files():
            with self._writer(content) as writer:
                self._added(writer, files)
            manifests.append(writer.to_manifest_file())
        return manifests

    def _one_per_content(
        self,
        touched: _Touched,
        untouched: _Untouched,
        found: set[str],
    ) -> list[ManifestFile]:
        """A maintenance pass's commit: one manifest per content and partition spec, holding what
        stays, what this commit removes (as DELETED entries) and what it adds, so that a scan of the
        maintained table opens as many manifests as a freshly built table's (one). Rewriting each
        touched manifest on its own, as a run does, left a compacted table with one manifest per
        manifest the pass touched: eight after 40 runs, each read by every scan."""
        groups = {
            group: [*touched.get(group, []), *(entries for _, entries in untouched.get(group, []))]
            for group in {*touched, *untouched}
        }
        spec_id = self._transaction.table_metadata.default_spec_id
        new = dict(self._new_files())
        manifests: list[ManifestFile] = []
        for (content, group_spec), lists in groups.items():
            with self._writer(content, group_spec) as writer:
                for entries in lists:
                    for entry in entries:
                        self._entry(writer, entry, found)
                if group_spec == spec_id:
                    self._added(writer, new.pop(content, []))
            manifests.append(writer.to_manifest_file())
        for content, files in new.items():
            with self._writer(content) as writer:
                self._added(writer, files)
            manifests.append(writer.to_manifest_file())
        return manifests

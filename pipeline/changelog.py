"""Which change-log objects a run must read.

Objects are named ``<destination>/<shard id>/<first seq>-<last seq>.jsonl.gz`` (40-digit,
zero-padded; docs/design.md). The sink writes a shard's objects in order and a replay rewrites the
same name, so an object whose last sequence number is at or below its shard's watermark has been
merged already and need not be read again. Objects that straddle the watermark (a replay cut into
different batches) are read, and their already-merged changes filtered out by sequence number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pipeline.schemas import SEQUENCE_DIGITS

_NAME = re.compile(
    rf"/(?P<shard>[^/]+)/(?P<first>\d{{{SEQUENCE_DIGITS}}})-(?P<last>\d{{{SEQUENCE_DIGITS}}})\.jsonl\.gz$"
)


@dataclass(frozen=True, order=True)
class ChangeLogObject:
    uri: str
    shard_id: str | None  # None: a .jsonl.gz whose name does not follow the convention
    first: str | None
    last: str | None

    @classmethod
    def of(cls, uri: str) -> ChangeLogObject:
        match = _NAME.search(uri)
        if match is None:
            return cls(uri, None, None, None)
        return cls(uri, match["shard"], match["first"], match["last"])


@dataclass(frozen=True)
class Selection:
    to_read: tuple[ChangeLogObject, ...]
    already_merged: int
    unconventional: tuple[str, ...]  # read in full: their names say nothing about their range
    ignored: tuple[str, ...]  # not change-log objects (other extensions)


def select_objects(files: Iterable[str], watermarks: Mapping[str, str]) -> Selection:
    """Split a listing into objects to read and objects every change of which is already merged."""
    to_read: list[ChangeLogObject] = []
    merged = 0
    unconventional: list[str] = []
    ignored: list[str] = []
    for uri in sorted(files):
        if not uri.endswith(".jsonl.gz"):
            ignored.append(uri)
            continue
        obj = ChangeLogObject.of(uri)
        if obj.shard_id is None or obj.last is None:
            unconventional.append(uri)
            to_read.append(obj)
            continue
        mark = watermarks.get(obj.shard_id)
        if mark is not None and obj.last <= mark:
            merged += 1
        else:
            to_read.append(obj)
    return Selection(tuple(to_read), merged, tuple(unconventional), tuple(ignored))

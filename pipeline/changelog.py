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
from itertools import pairwise

from pipeline.schemas import SEQUENCE_DIGITS

# The sink's folder of one lane is ``<shard id>~laneIIofNN`` (consumer/sinks/changelog.py). Said here,
# not imported: a Spark job's code archive holds only what the pipeline imports, not the worker's sinks
# (tests/pipeline/test_changelog_selection.py checks that both say the same).
LANE_MARK = "~lane"
RELOADS = "_reloads"  # where the sink lands reloads (pipeline/reloads.py reads them)

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
        if f"/{RELOADS}/" in uri:
            continue  # a reload's objects: a base, not changes (pipeline/reloads.py)
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


def may_hold_copies(objects: Iterable[ChangeLogObject]) -> bool:
    """Whether one change (shard id + sequence number) can be in two of these objects.

    The sink writes each change once into an object named after its folder (the shard, or one lane
    of it) and the first and last sequence numbers it holds, and a replay of the same batch
    overwrites its own object. A change can therefore be in two objects only when two objects of one
    folder have overlapping ranges (a replay cut into other batches, or a fenced zombie still
    writing), when one shard has folders of different lane layouts (a replay with another
    ``parallelization_factor``; lanes of one layout hold disjoint records), or when an object's name
    says nothing of its range. Otherwise every valid line is a distinct change, and a full rebuild
    can count lines instead of distinct (shard id, sequence number) pairs per key.
    """
    layouts: dict[str, set[str]] = {}
    ranges: dict[str, list[tuple[str, str]]] = {}
    for obj in objects:
        if obj.shard_id is None or obj.first is None or obj.last is None:
            return True
        shard, _, lane = obj.shard_id.partition(LANE_MARK)
        layouts.setdefault(shard, set()).add(lane.partition("of")[2])
        ranges.setdefault(obj.shard_id, []).append((obj.first, obj.last))
    if any(len(found) > 1 for found in layouts.values()):
        return True
    for spans in ranges.values():
        spans.sort()
        if any(later[0] <= earlier[1] for earlier, later in pairwise(spans)):
            return True
    return False

"""Compare what the load generator wrote (the oracle) with what the fleet landed in the change log.

Pure over two inputs: the oracle's writes and the change-log lines. Reading the files is done by
:func:`read_oracle` and :func:`read_changelog` at the edge.

- *delivered*: distinct (shard, sequence number) pairs in the change log;
- *duplicates*: the same (shard, sequence number) landed in more than one object (a replay after a
  worker died between processing and checkpointing); a replay of the *same* object name overwrites and
  is invisible here, as intended;
- *lost*: oracle writes with no delivered change;
- *unexpected*: delivered changes the oracle does not know (must be 0);
- *order violations*: items whose changes, in the order they were *delivered* (landing time, then
  sequence number within a batch), are not in the order the writes were made. An item that moved
  from a parent shard to a child is in order only if the parent's changes landed first, so this
  also checks parents before children.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Delivered:
    key: str
    event: str
    w: int
    shard_id: str
    sequence_number: str
    source: str
    landed_at: float = 0.0


@dataclass
class Verdict:
    written: int
    delivered: int
    lost: int
    duplicates: int
    unexpected: int
    order_violations: int
    duplicate_objects: list[str] = field(default_factory=list)
    # Every duplicated position, by shard and position, with every copy (source, landed at) in landing
    # order: who landed a record first tells a redelivery's cause when the log does not.
    duplicate_copies: list[tuple[str, str, tuple[tuple[str, float], ...]]] = field(default_factory=list)
    lost_examples: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.unexpected == 0 and self.order_violations == 0


def _number(value: Any) -> int:
    return int(value["N"]) if isinstance(value, dict) and "N" in value else -1


def parse_change(line: dict[str, Any], key_attribute: str, source: str) -> Delivered:
    image = line.get("oldImage") if line["eventName"] == "REMOVE" else line.get("newImage")
    key_value = line["keys"][key_attribute]
    key = next(iter(key_value.values()))
    return Delivered(
        key=str(key),
        event=line["eventName"],
        w=_number((image or {}).get("w")),
        shard_id=line["shardId"],
        sequence_number=line["sequenceNumber"],
        source=source,
        landed_at=float(line.get("landedAt") or 0.0),
    )


def read_oracle(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as handle:
        return [(d["key"], d["event"], int(d["w"])) for d in map(json.loads, handle) if d]


def read_changelog(directory: Path, key_attribute: str) -> Iterator[Delivered]:
    for obj in sorted(directory.rglob("*.jsonl.gz")):
        with gzip.open(obj, "rt", encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield parse_change(json.loads(line), key_attribute, str(obj.relative_to(directory)))


def judge(written: Iterable[tuple[str, str, int]], delivered: Iterable[Delivered]) -> Verdict:
    expected: dict[str, list[tuple[str, int]]] = defaultdict(list)
    total_written = 0
    for key, event, w in written:
        expected[key].append((event, w))
        total_written += 1

    by_position: dict[tuple[str, str], Delivered] = {}
    landings: dict[tuple[str, str], list[tuple[float, str]]] = {}  # duplicated positions only
    duplicate_objects: list[str] = []
    for change in delivered:
        position = (change.shard_id, change.sequence_number)
        first = by_position.get(position)
        if first is None:
            by_position[position] = change
        else:
            landings.setdefault(position, [(first.landed_at, first.source)]).append(
                (change.landed_at, change.source)
            )
            # The first landing is the delivery; a later copy (a zombie's) is a duplicate.
            later, by_position[position] = (
                (change, first) if change.landed_at >= first.landed_at else (first, change)
            )
            duplicate_objects.append(later.source)

    observed: dict[str, list[tuple[float, int, str, int]]] = defaultdict(list)
    for change in by_position.values():
        observed[change.key].append((change.landed_at, int(change.sequence_number), change.event, change.w))

    lost = unexpected = violations = 0
    lost_examples: list[tuple[str, str, int]] = []
    for key in expected.keys() | observed.keys():
        want = expected.get(key, [])
        got = [(event, w) for _, _, event, w in sorted(observed.get(key, []))]
        want_set, got_set = Counter(want), Counter(got)
        missing = want_set - got_set
        lost += sum(missing.values())
        unexpected += sum((got_set - want_set).values())
        lost_examples.extend((key, event, w) for (event, w) in list(missing)[:3])
        present = [item for item in want if item in got_set]
        if [item for item in got if item in want_set] != present:
            violations += 1
    return Verdict(
        written=total_written,
        delivered=len(by_position),
        lost=lost,
        duplicates=len(duplicate_objects),  # one per copy after a position's first
        unexpected=unexpected,
        order_violations=violations,
        duplicate_objects=sorted(set(duplicate_objects)),
        duplicate_copies=[
            (shard, sequence, tuple((source, at) for at, source in sorted(landings[(shard, sequence)])))
            for shard, sequence in sorted(
                landings, key=lambda p: (p[0], int(p[1]) if p[1].isdigit() else -1, p[1])
            )
        ],
        lost_examples=lost_examples[:10],
    )

"""What a Scan costs, as DynamoDB charges it, and when it was read: the emulator's side of a reload's
pace (``worker.on_trimmed: reload`` keeps to a share of the table's read capacity).

moto answers every Scan's ``ConsumedCapacity`` with 1.0 whatever it read. The emulator charges what
DynamoDB documents instead: the size of the items the page read, rounded up to the next 4 KB, one
unit per 4 KB for a strongly consistent read and half that for an eventually consistent one (at
least one such step per request). It rewrites the answer's ``ConsumedCapacity`` when one was asked
for, and keeps every Scan's time and units per table (:class:`ReadLog`), for a test to measure the
read rate from outside the client (``GET /_emulator/reads?table=``).
"""

from __future__ import annotations

import base64
import math
import threading
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

READ_UNIT_BYTES = 4096


def value_size(value: Mapping[str, Any]) -> int:
    """An attribute value's size in bytes (DynamoDB's item-size rules, approximately for numbers)."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(str(raw).encode())
    if kind == "N":
        return _number_size(str(raw))
    if kind == "B":
        return len(base64.b64decode(raw)) if isinstance(raw, str) else len(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in raw)
    if kind == "NS":
        return sum(_number_size(str(n)) for n in raw)
    if kind == "BS":
        return sum(len(base64.b64decode(b)) if isinstance(b, str) else len(b) for b in raw)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in raw.items())
    return len(str(raw).encode())


def _number_size(text: str) -> int:
    try:
        digits = Decimal(text).normalize().as_tuple().digits
    except InvalidOperation:
        return len(text)
    return (len(digits) + 1) // 2 + 1


def item_size(item: Mapping[str, Any]) -> int:
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def scan_units(items: list[Mapping[str, Any]], *, consistent: bool) -> float:
    """Read units of one Scan page that read ``items``."""
    steps = max(1, math.ceil(sum(item_size(i) for i in items) / READ_UNIT_BYTES))
    return float(steps) if consistent else steps / 2


class ReadLog:
    """Every Scan's (monotonic ms it arrived, units, TotalSegments or 0 for a plain Scan), per table."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reads: dict[str, list[tuple[int, float, int]]] = {}

    def add(self, table: str, at_millis: int, units: float, segments: int) -> None:
        with self._lock:
            self._reads.setdefault(table, []).append((at_millis, units, segments))

    def of(self, table: str) -> list[tuple[int, float, int]]:
        with self._lock:
            return list(self._reads.get(table, ()))

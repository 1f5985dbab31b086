"""Which records reach the processor (``processing.filter``).

Filtered records are not processed but still count as done: the checkpoint moves over them, so a
shard of uninteresting changes never holds the fleet back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from consumer.records import StreamRecord
from ground.settings import FilterSettings


def _same(expected: Any, actual: Any) -> bool:
    """YAML gives ints and floats; images give Decimals: compare numbers as numbers."""
    if isinstance(actual, Decimal) and isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return actual == Decimal(str(expected))
    return bool(expected == actual)


def _matches(expected: Mapping[str, Any], values: Mapping[str, Any] | None) -> bool:
    if not expected:
        return True
    if values is None:
        return False
    return all(name in values and _same(value, values[name]) for name, value in expected.items())


@dataclass(frozen=True)
class RecordFilter:
    event_names: frozenset[str] = frozenset()
    key_equals: Mapping[str, Any] | None = None
    new_image_equals: Mapping[str, Any] | None = None

    @classmethod
    def from_settings(cls, settings: FilterSettings) -> RecordFilter:
        return cls(
            frozenset(settings.event_names), dict(settings.key_equals), dict(settings.new_image_equals)
        )

    @property
    def keeps_everything(self) -> bool:
        return not (self.event_names or self.key_equals or self.new_image_equals)

    def keeps(self, record: StreamRecord) -> bool:
        if self.event_names and record.event_name not in self.event_names:
            return False
        if self.key_equals and not _matches(self.key_equals, record.keys):
            return False
        return not self.new_image_equals or _matches(self.new_image_equals, record.new_image)

"""A plan's figures, each with the formula it came from, and the advice next to them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    formula: str


@dataclass(frozen=True)
class Plan:
    env: str
    figures: list[Figure]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The settings the figures were computed from, as (key, value) in the order they are used.
    inputs: list[tuple[str, str]] = field(default_factory=list)

    def value(self, name: str) -> float:
        for figure in self.figures:
            if figure.name == name:
                return figure.value
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "inputs": dict(self.inputs),
            "figures": [asdict(f) for f in self.figures],
            "warnings": self.warnings,
            "notes": self.notes,
        }


@dataclass
class Sheet:
    """A plan as its parts add to it, in order: the figures, the warnings and the notes."""

    figures: list[Figure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str, formula: str) -> float:
        self.figures.append(Figure(name, value, unit, formula))
        return value

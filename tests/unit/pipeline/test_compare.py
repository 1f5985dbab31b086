"""verify's canonical form of an item, for every DynamoDB type at the top level (pure, no Spark)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.compare import attribute_from_wire, canonical_item
from pipeline.schemas import ATTRIBUTE

FIELDS = ATTRIBUTE.fieldNames()


def stored(**value: Any) -> dict[str, Any]:
    """An attribute as a snapshot row holds it: DynamoDB JSON's fields, one of them set."""
    assert set(value) <= set(FIELDS)
    return {**dict.fromkeys(FIELDS), **value}


# (the value as the low-level client returns it, the same value as the snapshot stores it)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "S": ({"S": "text"}, stored(s="text")),
    "N": ({"N": "1.50"}, stored(n="1.5")),
    "B": ({"B": b"\x00\x01"}, stored(b=bytearray(b"\x00\x01"))),
    "BOOL false": ({"BOOL": False}, stored(bool=False)),
    "NULL": ({"NULL": True}, stored(null=True)),
    "SS": ({"SS": ["y", "x"]}, stored(ss=["x", "y"])),
    "NS": ({"NS": ["10", "2.0"]}, stored(ns=["2", "10"])),
    "BS": ({"BS": [b"\x01", b"\x00"]}, stored(bs=[bytearray(b"\x00"), bytearray(b"\x01")])),
    "M": ({"M": {"b": {"N": "2"}, "a": {"NULL": True}}}, stored(m='{"a":{"NULL":true},"b":{"N":"2.0"}}')),
    "L": ({"L": [{"BOOL": False}, {"B": b"\x00"}]}, stored(l='[{"BOOL":false},{"B":"AA=="}]')),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_scanned_value_and_its_stored_form_compare_equal(case: str) -> None:
    scanned, snapshot = CASES[case]
    ((kind, _),) = scanned.items()
    form = canonical_item({"x": snapshot})
    assert form is not None and json.loads(form)["x"][0] == kind  # read as its own type
    assert canonical_item({"x": attribute_from_wire(scanned)}) == form


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_scanned_value_sets_exactly_its_own_field(case: str) -> None:
    scanned, _ = CASES[case]
    ((kind, _),) = scanned.items()
    row = attribute_from_wire(scanned)
    assert list(row) == FIELDS
    assert [name for name, value in row.items() if value is not None] == [kind.lower()]


def test_values_of_different_types_or_values_differ() -> None:
    forms = {case: canonical_item({"x": snapshot}) for case, (_, snapshot) in CASES.items()}
    assert len(set(forms.values())) == len(forms)
    assert canonical_item({"x": stored(bool=False)}) != canonical_item({"x": stored(bool=True)})
    assert canonical_item({"x": stored(null=True)}) != canonical_item({"x": stored(s="")})

"""An image converts the same through the fast path as through the careful one, and a malformed value
still gets the careful path's error naming its path.

:func:`consumer.records.deserialize_item` tries a fast conversion first and converts again with the
careful one on any exception; the fast path must never accept what the careful one refuses, nor
return another value. Random values (hypothesis), well formed and malformed, are converted both ways.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.records import AttributeValueError, deserialize_item
from consumer.records.attribute_values import _deserialize_map, _fast_map

# Leaves as the wire sends them, and near misses of each: wrong types, numbers DynamoDB cannot
# hold, bad base64, sets that are strings or hold non-strings, unknown tags, two tags.
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=6)
)
_number_text = st.one_of(
    st.sampled_from(["1", "-0.5", "1E+3", "1" * 39, "1E-170", "NaN", "Infinity", "abc", "", " 1"]),
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str),
)
_b64 = st.sampled_from(["", "YQ==", "AAEC", "!!!", "YQ", "Zm9v\n"])
_leaf = st.one_of(
    st.builds(lambda v: {"S": v}, st.one_of(st.text(max_size=8), _scalars)),
    st.builds(lambda v: {"N": v}, st.one_of(_number_text, _scalars)),
    st.builds(lambda v: {"BOOL": v}, _scalars),
    st.builds(lambda v: {"NULL": v}, _scalars),
    st.builds(lambda v: {"B": v}, st.one_of(_b64, _scalars)),
    st.builds(lambda v: {"SS": v}, st.one_of(st.lists(st.text(max_size=4), max_size=3), st.text(max_size=3))),
    st.builds(lambda v: {"NS": v}, st.lists(st.one_of(_number_text, _scalars), max_size=3)),
    st.builds(lambda v: {"BS": v}, st.lists(st.one_of(_b64, _scalars), max_size=3)),
    st.builds(lambda v: {"X": v}, _scalars),
    st.builds(lambda v: {"S": v, "N": "1"}, st.text(max_size=3)),
    st.just({}),
    _scalars,
)
_values = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.builds(
            lambda v: {"M": v}, st.one_of(st.dictionaries(st.text(max_size=4), inner, max_size=3), inner)
        ),
        st.builds(lambda v: {"L": v}, st.one_of(st.lists(inner, max_size=3), inner)),
    ),
    max_leaves=8,
)
_images = st.dictionaries(st.text(max_size=5), _values, max_size=4)


def careful(image: Any) -> tuple[str, Any]:
    try:
        return "value", _deserialize_map(image)
    except AttributeValueError as exc:
        return "error", (exc.path, exc.problem)


def converted(image: Any) -> tuple[str, Any]:
    try:
        return "value", deserialize_item(image)
    except AttributeValueError as exc:
        return "error", (exc.path, exc.problem)


@settings(max_examples=400, deadline=None)
@given(image=_images)
def test_the_fast_path_converts_as_the_careful_one_or_not_at_all(image: dict[str, Any]) -> None:
    expected = careful(image)
    assert converted(image) == expected
    try:
        fast = _fast_map(image)
    except Exception:  # declined: the careful path decides (above)
        return
    assert ("value", fast) == expected  # never a value the careful path refuses or converts otherwise


@pytest.mark.parametrize(
    ("image", "path"),
    [
        ({"a": {"M": {"b": {"L": [{"S": "x"}, {"N": "1" * 39}]}}}}, ".a.b[1]"),
        ({"a": {"SS": "abc"}}, ".a"),
        ({"a": {"S": 1}}, ".a"),
        ({"a": {"BOOL": "false"}}, ".a"),
        ({"a": {"B": "!!!"}}, ".a"),
        ({"a": {"Q": 1}}, ".a"),
    ],
)
def test_a_malformed_value_gets_the_careful_paths_error_naming_its_path(
    image: dict[str, Any], path: str
) -> None:
    with pytest.raises(AttributeValueError) as caught:
        deserialize_item(image)
    assert caught.value.path == path

"""DynamoDB attribute values (``{"N": "1.5"}``) as Python values, checked as they are converted.

Python values follow boto3's ``TypeDeserializer``: ``N`` → ``Decimal``, ``B`` → ``bytes``,
``SS``/``NS``/``BS`` → ``set``, ``M`` → ``dict``, ``L`` → ``list``, ``NULL`` → ``None``. Numbers
use boto3's decimal context *with its traps*: a number that does not fit DynamoDB's 38 digits and
exponent range raises :class:`AttributeValueError` instead of being rounded or flushed to zero,
and so does text that is no number (boto3 would return NaN). The error names the attribute path;
the record's images add the record and the shard, and raise it where the processor reads the image,
so it fails that record through the processor's normal failure handling (retry, bisect, dead letter).

Two paths convert an image. :func:`deserialize_item` first tries the fast one (:func:`_fast_map`:
strings, numbers and maps converted inline in the loop over a map's or a list's members, the other
types by a table from type tag to converter, every check of the careful path kept as an exact type
test) and on *any* exception converts the image again with the careful one
(:func:`deserialize_value`), which raises the error naming the value's path. So a well-formed
image costs the fast path only, and a malformed one gets exactly the careful path's error. The fast
path accepts nothing the careful path refuses: each converter either returns what the careful path
returns for that value or raises.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from decimal import Clamped, Context, Decimal, DecimalException, Inexact, Overflow, Rounded, Underflow
from typing import Any

from consumer.records.errors import AttributeValueError

# boto3's TypeDeserializer context: DynamoDB's 38 digits and exponent range, with the signals that
# would change a number trapped. Without the traps a 39-digit number is silently rounded and 1E-170
# silently becomes 0 — a processor would then act on a value that is not the item's.
_DYNAMODB_CONTEXT = Context(
    Emin=-128, Emax=126, prec=38, traps=[Clamped, Overflow, Inexact, Rounded, Underflow]
)


def _member(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{key!r}]"


def _decimal(text: Any) -> Decimal:
    """An ``N`` value as boto3 converts it, but an error instead of NaN for text that is no number."""
    try:
        number = _DYNAMODB_CONTEXT.create_decimal(text)
    except DecimalException as exc:
        raise AttributeValueError(
            "",
            f"N {text!r} cannot be held exactly by a DynamoDB number (38 significant digits, "
            f"boto3's exponent range): {type(exc).__name__}",
        ) from exc
    except (TypeError, ValueError) as exc:
        raise AttributeValueError("", f"N {text!r} is not a number") from exc
    if not number.is_finite():  # boto3 returns NaN for "abc"; DynamoDB holds no NaN or Infinity
        raise AttributeValueError("", f"N {text!r} is not a number")
    return number


def _binary(raw: Any) -> bytes:
    """A ``B`` value: base64 text, checked. botocore's parser does not validate (``"!!!"`` decodes
    to ``b""``), which would hand a processor a value that is not the item's; DynamoDB only ever
    sends the standard alphabet with its padding."""
    if isinstance(raw, bytes):
        return raw
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise AttributeValueError("", f"B {str(raw)[:40]!r} is not base64: {exc}") from exc


def _members(kind: str, raw: Any) -> list[Any]:
    """The members of a set (``SS``, ``NS``, ``BS``) or list (``L``): a JSON array, never a string
    (``set("abc")`` would be three one-letter members) or a map (its keys)."""
    if not isinstance(raw, list):
        raise AttributeValueError("", f"{kind} value is a {type(raw).__name__}, not a list")
    return raw


def _strings(kind: str, raw: Any) -> list[str]:
    members = _members(kind, raw)
    for member in members:
        if not isinstance(member, str):
            raise AttributeValueError(
                "", f"{kind} member {member!r} is a {type(member).__name__}, not a string"
            )
    return members


def _deserialize_map(raw: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return {key: deserialize_value(value) for key, value in raw.items()}
    except AttributeValueError as first:
        # The failure path only (the comprehension above is the hot one): find the member that
        # failed, so the error names its path.
        for key, value in raw.items():
            try:
                deserialize_value(value)
            except AttributeValueError as exc:
                raise exc.under(_member(key)) from exc.__cause__
        raise first  # not reached: conversion is deterministic


def _deserialize_list(raw: list[Any]) -> list[Any]:
    try:
        return [deserialize_value(value) for value in raw]
    except AttributeValueError as first:
        for index, value in enumerate(raw):
            try:
                deserialize_value(value)
            except AttributeValueError as exc:
                raise exc.under(f"[{index}]") from exc.__cause__
        raise first  # not reached: conversion is deterministic


def deserialize_value(value: Mapping[str, Any]) -> Any:
    """One attribute value (``{"S": "x"}``) from its wire form to a Python value.

    Raises :class:`AttributeValueError` (its path relative to ``value``) for a value that cannot be
    converted; :meth:`StreamRecord.keys` and the images add the attribute name, record and shard.
    """
    try:
        ((kind, raw),) = value.items()
    except (AttributeError, ValueError):
        shape = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        raise AttributeValueError("", f"an attribute value has exactly one type key, got {shape}") from None
    try:
        if kind == "S":
            if not isinstance(raw, str):
                raise AttributeValueError("", f"S value {raw!r} is a {type(raw).__name__}, not a string")
            return raw
        if kind == "N":
            return _decimal(raw)
        if kind == "BOOL":
            if not isinstance(raw, bool):  # bool("false") is True
                raise AttributeValueError("", f"BOOL value {raw!r} is not true or false")
            return raw
        if kind == "M":
            return _deserialize_map(raw)
        if kind == "L":
            return _deserialize_list(_members(kind, raw))
        if kind == "NULL":
            return None
        if kind == "B":
            return _binary(raw)
        if kind == "SS":
            return set(_strings(kind, raw))
        if kind == "NS":
            return {_decimal(n) for n in _strings(kind, raw)}
        if kind == "BS":
            return {_binary(b) for b in _strings(kind, raw)}
    except (AttributeError, TypeError) as exc:  # e.g. an "M" that is no map, an "SS" that is no list
        raise AttributeValueError(
            "", f"{kind} value of type {type(raw).__name__} has the wrong shape"
        ) from exc
    raise AttributeValueError("", f"unknown attribute type {kind!r}")


# ---------------------------------------------------------------------------- the fast path

_create_decimal = _DYNAMODB_CONTEXT.create_decimal


class _DeclinedError(Exception):
    """The fast path declines a value; the careful path converts it again (and says what is wrong)."""


def _fast_number(raw: Any) -> Decimal:
    if type(raw) is str:
        number = _create_decimal(raw)  # the traps raise for a number DynamoDB cannot hold exactly
        if number.is_finite():
            return number
    raise _DeclinedError


def _fast_string(raw: Any) -> str:
    if type(raw) is str:
        return raw
    raise _DeclinedError


def _fast_bool(raw: Any) -> bool:
    if raw is True or raw is False:
        return raw
    raise _DeclinedError


def _fast_null(raw: Any) -> None:
    return None  # the careful path ignores NULL's value too


def _fast_nested_map(raw: Any) -> dict[str, Any]:
    if type(raw) is dict:
        return _fast_map(raw)
    raise _DeclinedError


def _fast_string_set(raw: Any) -> set[str]:
    if type(raw) is list:
        for member in raw:
            if type(member) is not str:
                raise _DeclinedError
        return set(raw)
    raise _DeclinedError


# The two containers convert their members in a loop of their own, the common types (strings,
# numbers, maps) inline: a call per value was most of a conversion's cost. Any other member, or a
# common one that fails its inline test, goes through its converter in _FAST (which declines it).


def _fast_map(raw: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        text = value.get("S")
        if type(text) is str and len(value) == 1:
            out[key] = text
            continue
        if len(value) != 1:
            raise _DeclinedError
        for kind, inner in value.items():  # the one member
            if kind == "N" and type(inner) is str and (number := _create_decimal(inner)).is_finite():
                out[key] = number
            elif kind == "M" and type(inner) is dict:
                out[key] = _fast_map(inner)
            else:
                out[key] = _FAST[kind](inner)  # KeyError for a type tag nobody knows
    return out


def _fast_list(raw: Any) -> list[Any]:
    if type(raw) is not list:
        raise _DeclinedError
    out: list[Any] = []
    append = out.append
    for value in raw:
        if len(value) != 1:
            raise _DeclinedError
        for kind, inner in value.items():  # the one member
            if kind == "M" and type(inner) is dict:
                append(_fast_map(inner))
            elif kind == "S" and type(inner) is str:
                append(inner)
            elif kind == "N" and type(inner) is str and (number := _create_decimal(inner)).is_finite():
                append(number)
            else:
                append(_FAST[kind](inner))
    return out


# The rarer types go through the careful path's own converters (they raise on anything wrong).
_FAST: dict[str, Callable[[Any], Any]] = {
    "S": _fast_string,
    "N": _fast_number,
    "M": _fast_nested_map,
    "L": _fast_list,
    "BOOL": _fast_bool,
    "NULL": _fast_null,
    "SS": _fast_string_set,
    "NS": lambda raw: {_decimal(n) for n in _strings("NS", raw)},
    "B": _binary,
    "BS": lambda raw: {_binary(b) for b in _strings("BS", raw)},
}


def deserialize_item(item: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An image (``{"name": {"S": "x"}}``) to Python values; errors carry the attribute's path."""
    if item is None:
        return None
    try:
        return _fast_map(item)
    except Exception:  # any failure: the careful path converts again, and explains
        pass
    try:
        return _deserialize_map(item)
    except AttributeError as exc:
        raise AttributeValueError("", f"the image is a {type(item).__name__}, not a map") from exc

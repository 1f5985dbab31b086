"""DynamoDB's items and errors as the simulated tables (simulation/ddb_tables.py) need them: the
errors a request is answered with, what an AttributeValue may be, and an item's size (which is what
capacity and Scan pages are measured in)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any


class ServerError(Exception):
    """A request DynamoDB answers with an error: its code, message, HTTP status and modelled fields."""

    def __init__(self, code: str, message: str, *, status: int = 400, **fields: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status, self.fields = code, message, status, fields


class UnmodelledRequestError(NotImplementedError):
    """A request outside what the model knows (an operation, a parameter, a type): it fails the
    simulated thread loudly instead of being answered by a guess."""


def invalid(message: str) -> ServerError:
    return ServerError("ValidationException", message)


def item_size(item: Mapping[str, Any]) -> int:
    """DynamoDB's item size: attribute names plus values (strings by UTF-8 length, numbers about
    one byte per two digits, one byte for a boolean)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        kind, raw = next(iter(value.items()))
        if kind == "S":
            size += len(raw.encode())
        elif kind == "N":
            size += (len(raw.lstrip("-").replace(".", "")) + 1) // 2 + 1
        elif kind == "SS":
            size += sum(len(s.encode()) for s in raw)
        else:
            size += 1
    return size


def units(size: int, per: int) -> int:
    return max(1, -(-size // per))


def check_value(name: str, value: Any) -> None:
    """An AttributeValue as DynamoDB accepts it (exactly one type; numbers parse; sets non-empty)."""
    if not isinstance(value, Mapping) or len(value) != 1:
        raise invalid(
            "Supplied AttributeValue has more than one datatypes set, "
            f"must contain exactly one of the supported datatypes ({name})"
        )
    kind, raw = next(iter(value.items()))
    if kind == "N":
        try:
            Decimal(raw)
        except (InvalidOperation, TypeError):
            raise invalid(f"A value provided cannot be converted into a number ({name})") from None
    elif kind == "SS":
        if not raw:
            raise invalid(
                f"One or more parameter values were invalid: An string set  may not be empty ({name})"
            )
        if len(set(raw)) != len(raw):
            raise invalid(
                f"One or more parameter values were invalid: Input collection {raw} contains duplicates."
            )
    elif kind not in ("S", "BOOL", "NULL"):
        raise UnmodelledRequestError(f"attribute {name}: type {kind} is not modelled")

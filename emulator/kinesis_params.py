"""Reading the parameters of a Kinesis request, as the service checks them (InvalidArgumentException)."""

from __future__ import annotations

import re
from typing import Any

from emulator.kinesis_engine import invalid

NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")


def text(params: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise invalid(
                f"1 validation error detected: Value null at '{name}' failed to satisfy constraint: "
                "Member must not be null"
            )
        return None
    if not isinstance(value, str) or not value:
        raise invalid(f"{name} must be a non-empty string")
    return value


def integer(params: dict[str, Any], name: str, low: int, high: int, default: int | None = None) -> int | None:
    value = params.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(
            f"1 validation error detected: Value '{value}' at '{name}' failed to satisfy constraint: "
            f"Member must have value between {low} and {high}"
        )
    return value


def stream_name(params: dict[str, Any]) -> tuple[str | None, str | None]:
    name, arn = text(params, "StreamName"), text(params, "StreamARN")
    if name is not None and not NAME.match(name):
        raise invalid(f"StreamName {name!r} must match [a-zA-Z0-9_.-]+ (1..128 characters)")
    return name, arn


def timestamp_ms(params: dict[str, Any], name: str) -> int:
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"{name} (epoch seconds) is required")
    return int(value * 1000)

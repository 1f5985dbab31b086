"""The emulator's exception hierarchy.

:class:`StreamsApiError` carries an AWS error code and HTTP status, so the HTTP layer can answer in
exactly the shape botocore parses (``{"__type": ..., "message": ...}``) and a client sees the same
exception class it would see from AWS.
"""

from __future__ import annotations

import json
from typing import Any


class EmulatorError(Exception):
    """Base of every error raised by the emulator package."""


class StreamsApiError(EmulatorError):
    """An error answered to a DynamoDB Streams client, AWS-shaped."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def validation(message: str) -> StreamsApiError:
    return StreamsApiError("ValidationException", message)


def request_params(body: bytes) -> dict[str, Any]:
    """A JSON-protocol request's parameters, refused as AWS refuses a body that is not a JSON object."""
    try:
        params = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StreamsApiError("SerializationException", f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(params, dict):
        raise StreamsApiError("SerializationException", "The request body must be a JSON object")
    return params


def not_found(message: str) -> StreamsApiError:
    return StreamsApiError("ResourceNotFoundException", f"Requested resource not found: {message}")


class ControlError(EmulatorError):
    """A control-API request that cannot be honoured (unknown table, bad body)."""


class StartupError(EmulatorError):
    """The emulator process did not start or did not become ready."""

"""Checks a raw Kinesis response body against botocore's output shape for its operation.

botocore parses whatever it is given: a member it does not know is dropped, a wrong type often
passes through. So the conformance tests read the raw body (a ``before-parse`` handler) and check
it here against the service model botocore ships: no unknown member, every required member, each
value of its shape's type, enum, pattern, length and range.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import botocore.session
from botocore.model import Shape

MODEL = botocore.session.get_session().get_service_model("kinesis")
# Where the service's own documented answers leave the model's bounds: PutRecords answers
# "FailedRecordCount": 0 when every record went in (the API reference's and the CLI's examples),
# though the model gives the count a minimum of 1.
ALLOWED = {("PutRecords.FailedRecordCount", 0)}


def problems(operation: str, body: bytes) -> list[str]:
    output = MODEL.operation_model(operation).output_shape
    document = json.loads(body or b"{}")
    if output is None:
        return [] if document == {} else [f"{operation} has no output shape, got {document}"]
    found: list[str] = []
    _check(output, document, operation, found)
    return found


def _check(shape: Shape, value: Any, path: str, found: list[str]) -> None:
    kind = shape.type_name
    meta = shape.metadata
    if kind == "structure":
        if not isinstance(value, dict):
            found.append(f"{path}: expected an object, got {value!r}")
            return
        members = shape.members  # type: ignore[attr-defined]
        for key in value:
            if key not in members:
                found.append(f"{path}.{key}: not a member of {shape.name}")
        for key in shape.required_members:  # type: ignore[attr-defined]
            if key not in value:
                found.append(f"{path}.{key}: required by {shape.name}, missing")
        for key, member in members.items():
            if key in value:
                _check(member, value[key], f"{path}.{key}", found)
    elif kind == "list":
        if not isinstance(value, list):
            found.append(f"{path}: expected a list, got {value!r}")
            return
        for index, item in enumerate(value):
            _check(shape.member, item, f"{path}[{index}]", found)  # type: ignore[attr-defined]
    elif kind == "string":
        if not isinstance(value, str):
            found.append(f"{path}: expected a string, got {value!r}")
            return
        if shape.enum and value not in shape.enum:  # type: ignore[attr-defined]
            found.append(f"{path}: {value!r} is not one of {shape.enum}")  # type: ignore[attr-defined]
        if "pattern" in meta and not re.search(meta["pattern"], value):
            found.append(f"{path}: {value!r} does not match {meta['pattern']}")
        if not meta.get("min", 0) <= len(value) <= meta.get("max", len(value)):
            found.append(f"{path}: length {len(value)} outside {meta.get('min')}..{meta.get('max')}")
    elif kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            found.append(f"{path}: expected an integer, got {value!r}")
        elif not meta.get("min", value) <= value <= meta.get("max", value) and (path, value) not in ALLOWED:
            found.append(f"{path}: {value} outside {meta.get('min')}..{meta.get('max')}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            found.append(f"{path}: expected a boolean, got {value!r}")
    elif kind == "timestamp":
        if isinstance(value, bool) or not isinstance(value, int | float):
            found.append(f"{path}: expected epoch seconds, got {value!r}")
    elif kind == "blob":
        try:
            decoded = base64.b64decode(value, validate=True)
        except (ValueError, TypeError):
            found.append(f"{path}: not base64: {str(value)[:40]!r}")
            return
        if not meta.get("min", 0) <= len(decoded) <= meta.get("max", len(decoded)):
            found.append(f"{path}: {len(decoded)} bytes outside {meta.get('min')}..{meta.get('max')}")
    else:
        found.append(f"{path}: shape type {kind} not checked here")


class ShapeRecorder:
    """Registered on a kinesis client: every successful response's raw body is checked."""

    def __init__(self, client: Any) -> None:
        self.checked: list[str] = []
        self.found: list[str] = []
        client.meta.events.register("before-parse.kinesis.*", self._on_parse)

    def _on_parse(self, operation_model: Any, response_dict: dict[str, Any], **_: Any) -> None:
        if response_dict.get("status_code") == 200:
            self.checked.append(operation_model.name)
            self.found.extend(problems(operation_model.name, response_dict["body"]))

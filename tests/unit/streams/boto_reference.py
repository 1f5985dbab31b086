"""What a stock boto3 consumer gets from the same bytes: botocore's parser + boto3's TypeDeserializer."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.types import Binary, TypeDeserializer
from botocore.parsers import create_parser


class BotoReference:
    def __init__(self) -> None:
        client = boto3.client("dynamodbstreams", region_name="us-east-1")
        self._shape = client.meta.service_model.operation_model("GetRecords").output_shape
        self._parser = create_parser("json")
        self._deserializer = TypeDeserializer()

    def parse(self, body: bytes) -> dict[str, Any]:
        return self._parser.parse({"body": body, "headers": {}, "status_code": 200}, self._shape)  # type: ignore[no-any-return]

    def image(self, image: dict[str, Any] | None) -> dict[str, Any] | None:
        if image is None:
            return None
        return {name: self._deserializer.deserialize(value) for name, value in image.items()}


def canonical(value: Any) -> Any:
    """A form where equal means identical: types are kept, Decimals by their exact text, Binary → bytes."""
    if isinstance(value, Binary):
        return ("bytes", value.value)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, Decimal):
        return ("decimal", str(value))
    if isinstance(value, bytes):
        return ("bytes", value)
    if isinstance(value, str):
        return ("str", value)
    if value is None:
        return ("none",)
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, canonical(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", tuple(canonical(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", frozenset(canonical(v) for v in value))
    raise TypeError(f"unexpected {type(value).__name__} in an image")

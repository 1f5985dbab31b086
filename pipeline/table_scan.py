"""Scan the live table (the emulator locally, AWS otherwise) for verification.

The client is passed in — built by the entry point from the same endpoint settings as the workers —
so tests hand in a client for moto's server. The scan is consistent (``ConsistentRead``) and runs on
the driver, page by page; fine for tables up to a few million items (see docs/pipeline.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from pipeline.errors import VerifyError


def scan_items(client: Any, table_name: str, page_size: int = 1000) -> Iterator[Mapping[str, Any]]:
    """Every item of ``table_name`` in the low-level attribute-value form."""
    pages = client.get_paginator("scan").paginate(
        TableName=table_name, ConsistentRead=True, PaginationConfig={"PageSize": page_size}
    )
    try:
        for page in pages:
            yield from page.get("Items", [])
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "?")
        raise VerifyError(f"cannot scan table {table_name!r} ({code}): {exc}") from exc
    except BotoCoreError as exc:
        raise VerifyError(f"cannot scan table {table_name!r}: {exc}") from exc

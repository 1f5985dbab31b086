"""``{account}`` and ``{region}`` in the S3 locations of config/*.yaml, filled in by the loader.

S3 bucket names are global across every AWS account and region: a shipped name such as
``orders-stream-consumer-prod-changelog`` belongs to whoever deploys it first, and the same
environment deployed to a second region or a second account collides with itself. Written as
``s3://orders-stream-consumer-prod-{account}-{region}/changes``, the bucket is the environment's
own wherever it is deployed. The loader fills both in once the account is known (``account:`` or
``CONSUMER_ACCOUNT``; the region always has a value); until then the locations keep their braces,
:func:`unfilled_locations` names them, and ``consumer run`` refuses to start on them.

Only the keys below are filled in: they are the locations the product itself reads and writes
(the change log, the dead letter, the pipeline's). A processor's own options are its business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PLACEHOLDERS = ("{account}", "{region}")
# Key paths (as written in config/*.yaml) whose string values may name the placeholders.
LOCATION_KEYS: tuple[tuple[str, ...], ...] = (
    ("processing", "options", "destination"),
    ("processing", "dead_letter", "uri"),
    ("pipeline", "changelog_uri"),
    ("pipeline", "snapshot_uri"),
    ("pipeline", "stats_uri"),
    ("pipeline", "emr_work_uri"),
)


def _account_text(value: object) -> str | None:
    # YAML reads an unquoted account as a number; the account's own validator judges its form.
    if isinstance(value, bool) or value is None:
        return None
    return str(value)


def fill_locations(data: Any, default_region: str) -> Any:
    """The merged configuration with ``{account}`` and ``{region}`` filled in where the account is
    known (for a ``mode="before"`` validator of the root model); unchanged otherwise."""
    if not isinstance(data, Mapping):
        return data
    account = _account_text(data.get("account"))
    if account is None:
        return data
    region = str(data.get("region") or default_region)
    filled = _copy(data)
    for path in LOCATION_KEYS:
        parent: Any = filled
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and isinstance(parent.get(path[-1]), str):
            parent[path[-1]] = parent[path[-1]].replace("{account}", account).replace("{region}", region)
    return filled


def _copy(data: Mapping[str, Any]) -> dict[str, Any]:
    """The nested mappings along the location keys copied, so the caller's data is left as it was."""
    copied = dict(data)
    for section, *rest in LOCATION_KEYS:
        if isinstance(copied.get(section), Mapping):
            copied[section] = dict(copied[section])
            if len(rest) == 2 and isinstance(copied[section].get(rest[0]), Mapping):
                copied[section][rest[0]] = dict(copied[section][rest[0]])
    return copied


def unfilled_locations(values: Mapping[str, str | None]) -> list[str]:
    """The keys (of ``key path -> value``) whose value still names a placeholder."""
    return [key for key, value in values.items() if value and any(p in value for p in PLACEHOLDERS)]

"""Which Iceberg catalog holds an environment's snapshot tables, and their names in it.

A ``snapshot_uri`` on this machine gets a SQL catalog on SQLite (``<snapshot_uri>/catalog.db``,
warehouse ``<snapshot_uri>/warehouse``); an ``s3://`` one gets the AWS Glue Data Catalog (warehouse
``<snapshot_uri>/warehouse``), which Athena, EMR and Trino read.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.storage import is_local, join, local_path

CATALOG = "consumer"  # the SQL catalog scopes its tables by catalog name: readers use this one
_NAME = re.compile(r"[^a-z0-9_]+")


def sql_name(text: str) -> str:
    """A catalog-safe name: lower case, runs of other characters → ``_`` (Glue's rules)."""
    return _NAME.sub("_", text.lower()).strip("_") or "default"


def namespace_for(application_name: str, env: str) -> str:
    return sql_name(f"{application_name}_{env}")


def open_catalog(snapshot_uri: str, region: str | None, endpoint_url: str | None) -> Any:
    """The catalog of ``snapshot_uri``: SQLite beside a local one, Glue for ``s3://``."""
    if is_local(snapshot_uri):
        from pyiceberg.catalog.sql import SqlCatalog

        root = local_path(snapshot_uri).resolve()
        root.mkdir(parents=True, exist_ok=True)
        return SqlCatalog(
            CATALOG,
            uri=f"sqlite:///{root / 'catalog.db'}",
            warehouse=(root / "warehouse").as_uri(),
        )
    from pyiceberg.catalog.glue import GlueCatalog

    properties = {"warehouse": join(snapshot_uri, "warehouse")}
    if region:
        properties["glue.region"] = region
        properties["s3.region"] = region
    if endpoint_url:  # an emulator of Glue (tests); AWS otherwise
        properties["glue.endpoint"] = endpoint_url
    return GlueCatalog(CATALOG, **properties)

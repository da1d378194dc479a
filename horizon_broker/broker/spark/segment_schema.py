"""How Spark reads a table's segment files when they were written under several schema versions.

Measured on Spark 4.3 (this checkout's, both Parquet readers): given the explicit schema of every
column ever added under its newest type, the reader widens ``int`` to ``bigint``, ``float`` to
``double`` and a decimal's precision itself, and reads a column a file lacks as NULL. So one
read per view covers files of every version, with no per-file-set casts and no footer opened to
plan (``mergeSchema`` would open every footer). A column's default is not filled at read time
(Spark could, from ``EXISTS_DEFAULT`` field metadata): rows written before the column was added
read NULL everywhere, so a rewrite never changes a value and every reader (Spark, direct
lookups, passthrough clients) agrees (docs/guides/schema-changes.md).
"""

from __future__ import annotations

from horizon_broker.watermark.catalog import VALIDITY_COLUMNS, TableDescriptor


def storage_ddl(descriptor: TableDescriptor) -> str:
    """The Spark DDL schema of a table's segment files: every column any schema version had
    (newest type), then the validity columns."""
    columns = [f"`{c.name}` {c.type}" for c in descriptor.schema_history.storage_columns()]
    columns += [f"`{name}` bigint" for name in VALIDITY_COLUMNS]
    return ", ".join(columns)


def storage_column_names(descriptor: TableDescriptor) -> tuple[str, ...]:
    """The names :func:`storage_ddl` gives a segment view, in its order (the catalog's
    ``view_columns``)."""
    stored = descriptor.schema_history.storage_columns()
    return (*(column.name for column in stored), *VALIDITY_COLUMNS)

"""Ingestion and compaction under a table's registered schema versions.

The table file gives a table its first columns; after a ``horizon table alter`` the registered
descriptor (:mod:`horizon_broker.watermark.schema_store`) is the truth. Jobs write and read
segment files under the *storage* columns (every column any version had, under its newest type):
so a rewrite (the updater, compaction, retention) never loses a dropped column that snapshots
before the drop still read, and its output is under the newest schema. A batch's rows get the
current version's defaults where a value is null or missing.

When a server reads the schema: before each batch (one HGET), under the batch's transaction,
before it takes its commit timestamps; its clock moves above the newest version's timestamp
first, so every batch written under a version commits after the version took effect (a batch
already running when an alter lands commits under the previous columns, which readers read as
NULL or, for a widened column, widen).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.schema_rules import changes_between
from horizon_broker.watermark.schema_store import alter_table, registered_descriptor
from horizon_broker.watermark.schema_versions import SchemaHistory, normalized_type

log = logging.getLogger(__name__)


def under_schema(table: TableDefinition, history: SchemaHistory) -> TableDefinition:
    """``table`` as jobs write it under ``history``: its storage columns and current defaults."""
    columns = tuple(ColumnSpec(c.name, c.type) for c in history.storage_columns())
    defaults = tuple((c.name, c.default) for c in history.current.columns if c.default is not None)
    if columns == table.columns and defaults == table.column_defaults:
        return table
    return dataclasses.replace(table, columns=columns, column_defaults=defaults)


def follow_schema(client: Any, table: TableDefinition) -> TableDefinition:
    """``table`` under the schema registered now (itself when it never changed or is not
    registered yet); moves ``client``'s clock above the newest version's timestamp."""
    descriptor = registered_descriptor(client.redis, table.name, client.prefix)
    if descriptor is None or not descriptor.schema_versions:
        return table
    client.clock.observe(descriptor.schema_history.current.effective)
    followed = under_schema(table, descriptor.schema_history)
    if followed is not table:
        log.info(
            "table %s: writing schema version of %d (%s)",
            table.name,
            descriptor.schema_history.current.effective,
            ", ".join(c.name for c in followed.columns),
        )
    return followed


def register_from_file(client: Any, table: TableDefinition) -> TableDefinition:
    """Register ``table`` from its file, or, when it is registered with other columns, apply
    the change the file's ``[columns]`` imply (checked by the rules) unless they are those of
    an earlier schema version (a file behind a ``horizon table alter``: the registered schema
    holds). Returns the table under the registered schema."""
    asked = table.descriptor()
    registered = registered_descriptor(client.redis, table.name, client.prefix)
    if registered is None or registered == asked or not same_but_columns(registered, asked):
        client.register_table(asked)  # refuses any other difference, as before
        return follow_schema(client, table)
    history = registered.schema_history
    wanted = tuple((c.name, c.type) for c in asked.columns)
    if any(_same_columns(version.columns, wanted) for version in history.versions):
        if not _same_columns(history.current.columns, wanted):
            log.warning(
                "table %s: the table file's columns are an earlier schema version's; the "
                "registered schema (%s) holds",
                table.name,
                ", ".join(history.current.names),
            )
    else:
        changes = changes_between(history.current, wanted)
        outcome = alter_table(client.redis, table.name, changes, prefix=client.prefix)
        log.info("table %s: the table file altered its schema (%s)", table.name, changes)
        registered = outcome.descriptor
    client.register_table(registered)
    return follow_schema(client, table)


def _same_columns(columns: Any, wanted: tuple[tuple[str, str], ...]) -> bool:
    return [(c.name.lower(), normalized_type(c.type)) for c in columns] == [
        (name.lower(), normalized_type(type_)) for name, type_ in wanted
    ]


def same_but_columns(registered: TableDescriptor, asked: TableDescriptor) -> bool:
    plain = dataclasses.replace(registered, columns=asked.columns, schema_versions=())
    return plain == asked

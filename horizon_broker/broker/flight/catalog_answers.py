"""Flight SQL's catalog commands answered from the follower's tables, as the caller's grants
allow: SqlInfo, catalogs, schemas, tables (with their Arrow schemas), table types, primary keys
(the upsert key), XDBC types; no foreign keys. A table the caller may not read is never listed.
A table's Arrow schema comes from Spark's analysis, work on the shared driver: it waits for an
admission slot like a query."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
from google.protobuf.message import Message

from horizon_broker.broker._proto.arrow.flight.protocol.sql import flight_sql_pb2 as sql
from horizon_broker.broker.engine import QueryEngine
from horizon_broker.broker.flight import catalog
from horizon_broker.broker.flight.sql_info import sql_info_table
from horizon_broker.broker.grants import Principal
from horizon_broker.broker.spark.supervisor import check_engine_up
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL


class CatalogAnswers:
    """Answers catalog commands; a table's Arrow schema is derived once per descriptor."""

    def __init__(self, engine: QueryEngine, info: Any) -> None:
        self.engine = engine
        self.info = info
        self._table_schemas: dict[tuple[str, str], catalog.TableEntry] = {}

    def answer(self, principal: Principal, command: Message) -> pa.Table:
        """The table a catalog command answers with, as ``principal`` may see it."""
        if isinstance(command, sql.CommandGetSqlInfo):
            return sql_info_table(self.info, command.info)
        if isinstance(command, sql.CommandGetXdbcTypeInfo):
            return catalog.xdbc_types(command.data_type if command.HasField("data_type") else None)
        if isinstance(command, sql.CommandGetCatalogs):
            return catalog.catalogs()
        if isinstance(command, sql.CommandGetDbSchemas):
            return catalog.db_schemas(
                _optional(command, "catalog"), _optional(command, "db_schema_filter_pattern")
            )
        if isinstance(command, sql.CommandGetTables):
            return catalog.tables(
                self._table_entries(principal, with_schema=command.include_schema),
                catalog=_optional(command, "catalog"),
                schema_pattern=_optional(command, "db_schema_filter_pattern"),
                table_pattern=_optional(command, "table_name_filter_pattern"),
                table_types=list(command.table_types),
                include_schema=command.include_schema,
            )
        if isinstance(command, sql.CommandGetTableTypes):
            return catalog.table_types()
        if isinstance(command, sql.CommandGetPrimaryKeys):
            entry = self._table_entry(principal, command.table)
            return catalog.primary_keys(
                entry, _optional(command, "catalog"), _optional(command, "db_schema")
            )
        return catalog.foreign_keys()  # exported, imported keys, cross reference: none

    def _table_entries(
        self, principal: Principal, *, with_schema: bool
    ) -> list[catalog.TableEntry]:
        follower = self.engine.follower
        return [
            self._entry(follower.descriptor(name), with_schema, principal.name)
            for name in follower.tables()
            if principal.may_read(name)
        ]

    def _table_entry(self, principal: Principal, table: str) -> catalog.TableEntry | None:
        """The entry of ``table`` (named as in SQL: case-insensitive); None when the caller may
        not read it or it is not registered (a listing does not reveal ungranted tables)."""
        for name in self.engine.follower.tables():
            if name.lower() == table.lower() and principal.may_read(name):
                return self._entry(self.engine.follower.descriptor(name), False, principal.name)
        return None

    def _entry(self, descriptor: Any, with_schema: bool, identity: str) -> catalog.TableEntry:
        types = (*tuple(c.type for c in descriptor.columns), "bigint", "bigint")
        if not with_schema:
            return catalog.TableEntry(
                descriptor.name, pa.schema([]), tuple(descriptor.primary_key), types
            )
        key = (descriptor.name, repr(descriptor.columns))
        entry = self._table_schemas.get(key)
        if entry is None:
            names = [c.name for c in descriptor.columns] + [VALID_FROM, VALID_UNTIL]
            columns = ", ".join(
                f"CAST(NULL AS {kind}) AS `{name}`" for name, kind in zip(names, types, strict=True)
            )
            schema = self._analysed(f"SELECT {columns}", identity)
            entry = catalog.TableEntry(
                descriptor.name,
                catalog.annotated(descriptor.name, schema, types),
                tuple(descriptor.primary_key),
                types,
            )
            self._table_schemas[key] = entry
        return entry

    def _analysed(self, sql: str, identity: str) -> pa.Schema:
        """The Arrow schema Spark's analysis gives ``sql``, under an admission slot in
        ``identity``'s share (waiting at most the query timeout): a catalog listing is no way
        around the broker's limits."""
        engine = self.engine
        check_engine_up(engine.supervisor)
        deadline = time.monotonic() + engine.config.limits.query_timeout_s
        with engine.admission.slot(deadline=deadline, identity=identity):
            return engine.executor.schema(sql)


def _optional(message: Message, field: str) -> str | None:
    return getattr(message, field) if message.HasField(field) else None

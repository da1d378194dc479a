"""Answers to Flight SQL's catalog commands, from the broker's registered tables (pure).

Horizon has no catalogs and one database schema, ``horizon``: a table is listed as
``(NULL, 'horizon', <name>, 'TABLE')``, and ``horizon.<name>`` (as well as ``<name>``) resolves in
a query. Only tables the caller may read are listed. A table's schema is what ``SELECT *`` answers
(its columns, then ``validFrom`` and ``validUntil``); its primary key is the upsert key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from horizon_broker.broker.flight.sessions import DB_SCHEMA

TABLE_TYPE = "TABLE"

_TEXT = pa.string()
CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", _TEXT, nullable=False)])
DB_SCHEMAS_SCHEMA = pa.schema(
    [pa.field("catalog_name", _TEXT), pa.field("db_schema_name", _TEXT, nullable=False)]
)
TABLES_SCHEMA = pa.schema(
    [
        pa.field("catalog_name", _TEXT),
        pa.field("db_schema_name", _TEXT),
        pa.field("table_name", _TEXT, nullable=False),
        pa.field("table_type", _TEXT, nullable=False),
    ]
)
TABLES_WITH_SCHEMA_SCHEMA = TABLES_SCHEMA.append(
    pa.field("table_schema", pa.binary(), nullable=False)
)
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", _TEXT, nullable=False)])
PRIMARY_KEYS_SCHEMA = pa.schema(
    [
        pa.field("catalog_name", _TEXT),
        pa.field("db_schema_name", _TEXT),
        pa.field("table_name", _TEXT, nullable=False),
        pa.field("column_name", _TEXT, nullable=False),
        pa.field("key_sequence", pa.int32(), nullable=False),
        pa.field("key_name", _TEXT),
    ]
)
KEYS_SCHEMA = pa.schema(
    [
        pa.field("pk_catalog_name", _TEXT),
        pa.field("pk_db_schema_name", _TEXT),
        pa.field("pk_table_name", _TEXT, nullable=False),
        pa.field("pk_column_name", _TEXT, nullable=False),
        pa.field("fk_catalog_name", _TEXT),
        pa.field("fk_db_schema_name", _TEXT),
        pa.field("fk_table_name", _TEXT, nullable=False),
        pa.field("fk_column_name", _TEXT, nullable=False),
        pa.field("key_sequence", pa.int32(), nullable=False),
        pa.field("fk_key_name", _TEXT),
        pa.field("pk_key_name", _TEXT),
        pa.field("update_rule", pa.uint8(), nullable=False),
        pa.field("delete_rule", pa.uint8(), nullable=False),
    ]
)
"""Imported keys, exported keys and cross references: Horizon tables have no foreign keys."""


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A table as the catalog answers show it."""

    name: str
    schema: pa.Schema
    """What ``SELECT *`` answers (field metadata: the Flight SQL column attributes)."""
    primary_key: tuple[str, ...]
    types: tuple[str, ...] = ()
    """The Spark SQL type of each field of ``schema``."""


def like(pattern: str | None) -> Callable[[str], bool]:
    """A matcher for a Flight SQL filter pattern (``%`` any run, ``_`` one character, ``\\``
    escapes), case-insensitive like Spark's identifiers; None matches everything."""
    if pattern is None:
        return lambda _: True
    parts = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            parts.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        parts.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        index += 1
    compiled = re.compile("".join(parts), re.IGNORECASE | re.DOTALL)
    return lambda name: compiled.fullmatch(name) is not None


def _in_catalog(catalog: str | None) -> bool:
    """Whether a catalog filter admits Horizon's tables (which have none: only '' selects)."""
    return catalog is None or catalog == ""


def catalogs() -> pa.Table:
    return CATALOGS_SCHEMA.empty_table()


def db_schemas(catalog: str | None, pattern: str | None) -> pa.Table:
    rows = [DB_SCHEMA] if _in_catalog(catalog) and like(pattern)(DB_SCHEMA) else []
    return pa.table({"catalog_name": [None] * len(rows), "db_schema_name": rows}, DB_SCHEMAS_SCHEMA)


def tables(
    entries: Iterable[TableEntry],
    *,
    catalog: str | None,
    schema_pattern: str | None,
    table_pattern: str | None,
    table_types: Sequence[str],
    include_schema: bool,
) -> pa.Table:
    wanted_types = {t.upper() for t in table_types}
    chosen = []
    type_wanted = not wanted_types or TABLE_TYPE in wanted_types
    if type_wanted and _in_catalog(catalog) and like(schema_pattern)(DB_SCHEMA):
        matches = like(table_pattern)
        chosen = sorted((e for e in entries if matches(e.name)), key=lambda e: e.name)
    columns: dict[str, list[object]] = {
        "catalog_name": [None] * len(chosen),
        "db_schema_name": [DB_SCHEMA] * len(chosen),
        "table_name": [e.name for e in chosen],
        "table_type": [TABLE_TYPE] * len(chosen),
    }
    if not include_schema:
        return pa.table(columns, TABLES_SCHEMA)
    columns["table_schema"] = [e.schema.serialize().to_pybytes() for e in chosen]
    return pa.table(columns, TABLES_WITH_SCHEMA_SCHEMA)


def table_types() -> pa.Table:
    return pa.table({"table_type": [TABLE_TYPE]}, TABLE_TYPES_SCHEMA)


def primary_keys(entry: TableEntry | None, catalog: str | None, db_schema: str | None) -> pa.Table:
    """The upsert key of ``entry``, one row per column in key order."""
    keys: Sequence[str] = ()
    if entry is not None and _in_catalog(catalog) and db_schema in (None, DB_SCHEMA):
        keys = entry.primary_key
    name = entry.name if entry is not None else ""
    return pa.table(
        {
            "catalog_name": [None] * len(keys),
            "db_schema_name": [DB_SCHEMA] * len(keys),
            "table_name": [name] * len(keys),
            "column_name": list(keys),
            "key_sequence": list(range(1, len(keys) + 1)),
            "key_name": [f"{name}_pkey"] * len(keys),
        },
        PRIMARY_KEYS_SCHEMA,
    )


def foreign_keys() -> pa.Table:
    return KEYS_SCHEMA.empty_table()


def annotated(table: str, schema: pa.Schema, types: Sequence[str]) -> pa.Schema:
    """``schema`` with Flight SQL's column attributes (JDBC/ODBC drivers and ADBC read them)."""
    fields = []
    for field, spark_type in zip(schema, types, strict=True):
        fields.append(
            field.with_metadata(
                {
                    "ARROW:FLIGHT:SQL:DB_SCHEMA_NAME": DB_SCHEMA,
                    "ARROW:FLIGHT:SQL:TABLE_NAME": table,
                    "ARROW:FLIGHT:SQL:TYPE_NAME": spark_type.upper(),
                    "ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT": "0",
                    "ARROW:FLIGHT:SQL:IS_CASE_SENSITIVE": "1" if spark_type == "string" else "0",
                    "ARROW:FLIGHT:SQL:IS_READ_ONLY": "1",
                    "ARROW:FLIGHT:SQL:IS_SEARCHABLE": "1",
                }
            )
        )
    return pa.schema(fields)


# -- XDBC type info ---------------------------------------------------------------------------

XDBC_TYPES_SCHEMA = pa.schema(
    [
        pa.field("type_name", _TEXT, nullable=False),
        pa.field("data_type", pa.int32(), nullable=False),
        pa.field("column_size", pa.int32()),
        pa.field("literal_prefix", _TEXT),
        pa.field("literal_suffix", _TEXT),
        pa.field("create_params", pa.list_(pa.field("item", _TEXT, nullable=False))),
        pa.field("nullable", pa.int32(), nullable=False),
        pa.field("case_sensitive", pa.bool_(), nullable=False),
        pa.field("searchable", pa.int32(), nullable=False),
        pa.field("unsigned_attribute", pa.bool_()),
        pa.field("fixed_prec_scale", pa.bool_(), nullable=False),
        pa.field("auto_increment", pa.bool_()),
        pa.field("local_type_name", _TEXT),
        pa.field("minimum_scale", pa.int32()),
        pa.field("maximum_scale", pa.int32()),
        pa.field("sql_data_type", pa.int32(), nullable=False),
        pa.field("datetime_subcode", pa.int32()),
        pa.field("num_prec_radix", pa.int32()),
        pa.field("interval_precision", pa.int32()),
    ]
)

# (Spark type, XDBC data type, column size, literal prefix/suffix, radix, datetime subcode)
_SPARK_TYPES: tuple[tuple[str, int, int | None, str | None, int | None, int | None], ...] = (
    ("BOOLEAN", -7, 1, None, None, None),
    ("TINYINT", -6, 3, None, 10, None),
    ("BIGINT", -5, 19, None, 10, None),
    ("BINARY", -2, None, "X'", None, None),
    ("DECIMAL", 3, 38, None, 10, None),
    ("INT", 4, 10, None, 10, None),
    ("SMALLINT", 5, 5, None, 10, None),
    ("FLOAT", 6, 7, None, 2, None),
    ("DOUBLE", 8, 15, None, 2, None),
    ("STRING", 12, None, "'", None, None),
    ("DATE", 91, 10, "DATE '", None, 1),
    ("TIMESTAMP", 93, 29, "TIMESTAMP '", None, 3),
)


def xdbc_types(data_type: int | None) -> pa.Table:
    """The SQL types Horizon's columns have, as JDBC/ODBC describe types (ordered by data type,
    then name); ``data_type`` keeps one XDBC type."""
    rows = sorted(
        (t for t in _SPARK_TYPES if data_type is None or t[1] == data_type),
        key=lambda t: (t[1], t[0]),
    )
    suffix = {"'": "'", "X'": "'", "DATE '": "'", "TIMESTAMP '": "'"}
    columns = {
        "type_name": [t[0] for t in rows],
        "data_type": [t[1] for t in rows],
        "column_size": [t[2] for t in rows],
        "literal_prefix": [t[3] for t in rows],
        "literal_suffix": [suffix.get(t[3] or "") for t in rows],
        "create_params": [["precision", "scale"] if t[0] == "DECIMAL" else None for t in rows],
        "nullable": [1] * len(rows),
        "case_sensitive": [t[0] == "STRING" for t in rows],
        "searchable": [3] * len(rows),
        "unsigned_attribute": [False if t[4] else None for t in rows],
        "fixed_prec_scale": [False] * len(rows),
        "auto_increment": [False if t[4] else None for t in rows],
        "local_type_name": [t[0] for t in rows],
        "minimum_scale": [0 if t[0] == "DECIMAL" else None for t in rows],
        "maximum_scale": [38 if t[0] == "DECIMAL" else None for t in rows],
        "sql_data_type": [9 if t[5] else t[1] for t in rows],
        "datetime_subcode": [t[5] for t in rows],
        "num_prec_radix": [t[4] for t in rows],
        "interval_precision": [None] * len(rows),
    }
    return pa.table(columns, XDBC_TYPES_SCHEMA)

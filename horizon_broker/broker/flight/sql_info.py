"""The answer to ``CommandGetSqlInfo``: what this server is and which SQL it speaks, as Flight
SQL's dense union (one row per info id; each value in the union member of its kind)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib import metadata

import pyarrow as pa

# SqlInfo ids (Flight SQL's SqlInfo enum) Horizon answers.
SERVER_NAME = 0
SERVER_VERSION = 1
SERVER_ARROW_VERSION = 2
SERVER_READ_ONLY = 3
SERVER_SQL = 4
SERVER_SUBSTRAIT = 5
SERVER_TRANSACTION = 8
SERVER_CANCEL = 9
SERVER_STATEMENT_TIMEOUT = 100
SERVER_TRANSACTION_TIMEOUT = 101
SQL_DDL_CATALOG = 500
SQL_DDL_SCHEMA = 501
SQL_DDL_TABLE = 502
SQL_IDENTIFIER_CASE = 503
SQL_IDENTIFIER_QUOTE_CHAR = 504
SQL_QUOTED_IDENTIFIER_CASE = 505
SQL_ALL_TABLES_ARE_SELECTABLE = 506
SQL_NULL_ORDERING = 507
SQL_SEARCH_STRING_ESCAPE = 513
SQL_EXTRA_NAME_CHARACTERS = 514
SQL_SUPPORTS_COLUMN_ALIASING = 515
SQL_NULL_PLUS_NULL_IS_NULL = 516
SQL_SUPPORTS_TABLE_CORRELATION_NAMES = 518
SQL_SUPPORTS_DIFFERENT_TABLE_CORRELATION_NAMES = 519
SQL_SUPPORTS_EXPRESSIONS_IN_ORDER_BY = 520
SQL_SUPPORTS_ORDER_BY_UNRELATED = 521
SQL_SUPPORTED_GROUP_BY = 522
SQL_SUPPORTS_LIKE_ESCAPE_CLAUSE = 523
SQL_SUPPORTS_NON_NULLABLE_COLUMNS = 524
SQL_SUPPORTED_GRAMMAR = 525
SQL_ANSI92_SUPPORTED_LEVEL = 526
SQL_SUPPORTS_INTEGRITY_ENHANCEMENT_FACILITY = 527
SQL_OUTER_JOINS_SUPPORT_LEVEL = 528
SQL_SCHEMA_TERM = 529
SQL_PROCEDURE_TERM = 530
SQL_CATALOG_TERM = 531
SQL_CATALOG_AT_START = 532
SQL_SELECT_FOR_UPDATE_SUPPORTED = 536
SQL_STORED_PROCEDURES_SUPPORTED = 537
SQL_SUPPORTED_SUBQUERIES = 538
SQL_CORRELATED_SUBQUERIES_SUPPORTED = 539
SQL_SUPPORTED_UNIONS = 540
SQL_MAX_STATEMENT_LENGTH = 557
SQL_DEFAULT_TRANSACTION_ISOLATION = 562
SQL_TRANSACTIONS_SUPPORTED = 563
SQL_SUPPORTED_RESULT_SET_TYPES = 567
SQL_SUPPORTED_CONCURRENCIES_FOR_RESULT_SET_FORWARD_ONLY = 569
SQL_BATCH_UPDATES_SUPPORTED = 572
SQL_SAVEPOINTS_SUPPORTED = 573
SQL_NAMED_PARAMETERS_SUPPORTED = 574

# Enum values the answers use.
CASE_INSENSITIVE = 1  # SqlSupportedCaseSensitivity
NULLS_SORTED_LOW = 1  # SqlNullOrdering: NULLs first ascending, last descending (Spark's)
FULL_OUTER_JOINS = 2  # SqlOuterJoinsSupportLevel
TRANSACTION_NONE = 0  # SqlSupportedTransaction / SqlTransactionIsolationLevel


def bits(*positions: int) -> int:
    """An int32 bitmask with the given enum ordinals set."""
    mask = 0
    for position in positions:
        mask |= 1 << position
    return mask


STRING, BOOL, BIGINT, INT32_BITMASK, STRING_LIST, INT32_LIST_MAP = range(6)

VALUE_TYPE = pa.dense_union(
    [
        pa.field("string_value", pa.string(), nullable=False),
        pa.field("bool_value", pa.bool_(), nullable=False),
        pa.field("bigint_value", pa.int64(), nullable=False),
        pa.field("int32_bitmask", pa.int32(), nullable=False),
        pa.field("string_list", pa.list_(pa.string()), nullable=False),
        pa.field(
            "int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32())), nullable=False
        ),
    ],
    type_codes=list(range(6)),
)
SCHEMA = pa.schema(
    [pa.field("info_name", pa.uint32(), nullable=False), pa.field("value", VALUE_TYPE, False)]
)

Value = tuple[int, object]
"""(union member, value): the member says how a client reads the value (a bare Python int could
be a bigint or a bitmask)."""


def server_info(*, statement_ttl_s: float, max_sql_length: int) -> dict[int, Value]:
    """Every SqlInfo value Horizon reports."""
    try:
        version = metadata.version("horizon-broker")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {
        SERVER_NAME: (STRING, "Horizon"),
        SERVER_VERSION: (STRING, version),
        SERVER_ARROW_VERSION: (STRING, pa.__version__),
        SERVER_READ_ONLY: (BOOL, True),
        SERVER_SQL: (BOOL, True),
        SERVER_SUBSTRAIT: (BOOL, False),
        SERVER_TRANSACTION: (INT32_BITMASK, TRANSACTION_NONE),
        SERVER_CANCEL: (BOOL, True),
        SERVER_STATEMENT_TIMEOUT: (INT32_BITMASK, int(min(statement_ttl_s * 1000, 2**31 - 1))),
        SERVER_TRANSACTION_TIMEOUT: (INT32_BITMASK, 0),
        SQL_DDL_CATALOG: (BOOL, False),
        SQL_DDL_SCHEMA: (BOOL, False),
        SQL_DDL_TABLE: (BOOL, False),
        SQL_IDENTIFIER_CASE: (INT32_BITMASK, CASE_INSENSITIVE),
        SQL_IDENTIFIER_QUOTE_CHAR: (STRING, "`"),
        SQL_QUOTED_IDENTIFIER_CASE: (INT32_BITMASK, CASE_INSENSITIVE),
        SQL_ALL_TABLES_ARE_SELECTABLE: (BOOL, True),
        SQL_NULL_ORDERING: (INT32_BITMASK, NULLS_SORTED_LOW),
        SQL_SEARCH_STRING_ESCAPE: (STRING, "\\"),
        SQL_EXTRA_NAME_CHARACTERS: (STRING, ""),
        SQL_SUPPORTS_COLUMN_ALIASING: (BOOL, True),
        SQL_NULL_PLUS_NULL_IS_NULL: (BOOL, True),
        SQL_SUPPORTS_TABLE_CORRELATION_NAMES: (BOOL, True),
        SQL_SUPPORTS_DIFFERENT_TABLE_CORRELATION_NAMES: (BOOL, False),
        SQL_SUPPORTS_EXPRESSIONS_IN_ORDER_BY: (BOOL, True),
        SQL_SUPPORTS_ORDER_BY_UNRELATED: (BOOL, True),
        SQL_SUPPORTED_GROUP_BY: (INT32_BITMASK, bits(0, 1)),  # unrelated, beyond select
        SQL_SUPPORTS_LIKE_ESCAPE_CLAUSE: (BOOL, True),
        SQL_SUPPORTS_NON_NULLABLE_COLUMNS: (BOOL, False),
        SQL_SUPPORTED_GRAMMAR: (INT32_BITMASK, bits(0, 1)),  # minimum, core
        SQL_ANSI92_SUPPORTED_LEVEL: (INT32_BITMASK, bits(0)),  # entry
        SQL_SUPPORTS_INTEGRITY_ENHANCEMENT_FACILITY: (BOOL, False),
        SQL_OUTER_JOINS_SUPPORT_LEVEL: (INT32_BITMASK, FULL_OUTER_JOINS),
        SQL_SCHEMA_TERM: (STRING, "schema"),
        SQL_PROCEDURE_TERM: (STRING, ""),
        SQL_CATALOG_TERM: (STRING, ""),  # empty: no catalogs
        SQL_CATALOG_AT_START: (BOOL, False),
        SQL_SELECT_FOR_UPDATE_SUPPORTED: (BOOL, False),
        SQL_STORED_PROCEDURES_SUPPORTED: (BOOL, False),
        SQL_SUPPORTED_SUBQUERIES: (INT32_BITMASK, bits(0, 1, 2)),  # comparisons, EXISTS, IN
        SQL_CORRELATED_SUBQUERIES_SUPPORTED: (BOOL, True),
        SQL_SUPPORTED_UNIONS: (INT32_BITMASK, bits(0, 1)),  # UNION, UNION ALL
        SQL_MAX_STATEMENT_LENGTH: (BIGINT, max_sql_length),
        SQL_DEFAULT_TRANSACTION_ISOLATION: (INT32_BITMASK, TRANSACTION_NONE),
        SQL_TRANSACTIONS_SUPPORTED: (BOOL, False),
        SQL_SUPPORTED_RESULT_SET_TYPES: (INT32_BITMASK, bits(1)),  # forward only
        SQL_SUPPORTED_CONCURRENCIES_FOR_RESULT_SET_FORWARD_ONLY: (INT32_BITMASK, bits(1)),
        SQL_BATCH_UPDATES_SUPPORTED: (BOOL, False),
        SQL_SAVEPOINTS_SUPPORTED: (BOOL, False),
        SQL_NAMED_PARAMETERS_SUPPORTED: (BOOL, False),
    }


def sql_info_table(info: Mapping[int, Value], wanted: Iterable[int] = ()) -> pa.Table:
    """The rows for ``wanted`` ids (all, when empty), in the order asked; unknown ids are left
    out (a server answers what it knows)."""
    ids = [int(i) for i in wanted] or sorted(info)
    rows = [(i, info[i]) for i in ids if i in info]
    members: list[list[object]] = [[] for _ in range(6)]
    type_ids: list[int] = []
    offsets: list[int] = []
    for _, (member, value) in rows:
        type_ids.append(member)
        offsets.append(len(members[member]))
        members[member].append(value)
    children = [
        pa.array(values, type=field.type) for values, field in zip(members, VALUE_TYPE, strict=True)
    ]
    type_buffer = pa.array(type_ids, pa.int8()).buffers()[1]
    offset_buffer = pa.array(offsets, pa.int32()).buffers()[1]
    value = pa.UnionArray.from_buffers(
        VALUE_TYPE, len(rows), [None, type_buffer, offset_buffer], children=children
    )
    names = pa.array([i for i, _ in rows], pa.uint32())
    return pa.Table.from_arrays([names, value], schema=SCHEMA)

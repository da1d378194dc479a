"""The SQL layer: parse a client's Spark SQL once, refuse what is unsafe, read only visible versions.

Public API: :func:`parse_query` and :func:`bind` (or both at once, :func:`rewrite`),
:class:`Catalog`, :class:`CatalogTable`, :class:`FunctionPolicy`, :class:`RewriteLimits`,
:class:`WorkBudget`, :class:`RewriteResult`, :class:`QueryPlan` (with its :class:`QueryShape`),
:class:`TableRead`. ``functions_from_spark.function_policy_from_spark(spark)`` builds the policy
once at start-up. Pure (no I/O, no clocks); imports nothing of the broker but itself, and only
the pure layers below (``horizon_broker._core.errors``, ``horizon_broker._core.hlc``, ``timeline``, ``horizon_broker.watermark.catalog``).

Decisions where ``spec/sql.md`` is silent:

- One snapshot per query, taken over *scanned upsert* tables only. Append-only tables have no
  versions (no predicate, no LWM needed; ``VERSION AS OF`` on them is InvalidArgument); tables
  read only through ``table_changes`` are bounded by their own window instead.
- An explicit snapshot on one reference applies to every reference; differing explicit values are
  InvalidArgument naming both. Explicit snapshots are checked against every scanned upsert
  table's LWM and retention horizon (FailedPrecondition naming the bound and its value).
- ``TIMESTAMP AS OF`` / ``FOR SYSTEM_TIME AS OF`` take an ISO-8601 string (or ``TIMESTAMP '...'``),
  no zone meaning UTC, and read the last HLC of that millisecond. sqlglot parses both into the
  same node, so an integer there is refused (use ``VERSION AS OF`` for an HLC). Only literals
  are accepted, never expressions.
- ``table_changes('t', from[, to])``: bounds are integer HLCs or timestamp strings (last HLC of
  the millisecond, so a timestamp window is (end of ms1, end of ms2]); ``to`` defaults to the LWM.
  Output columns: user columns, ``_change_type``, ``_commit_timestamp``. Refused on append-only
  tables. Its alias defaults to the table name.
- Name resolution follows Spark 4: a CTE sees only earlier CTEs of its WITH (its own name in its
  body means the outer table/CTE), except under WITH RECURSIVE where it also sees itself; inner
  WITHs shadow outer ones; qualified names (``default.t``, ``horizon.t``,
  ``spark_catalog.default.t``) never name CTEs. CTE names starting ``__horizon`` are refused.
- Unregistered names and foreign namespaces/catalogs are NotFound; file paths
  (``parquet.`/p```, names containing ``/`` or ``:``) and table functions other than
  ``table_changes`` and the pure generators in ``ALLOWED_TABLE_FUNCTIONS`` (``range``,
  ``explode``...) are InvalidArgument.
- Functions: ``DENIED_FUNCTIONS`` (reflection, file/XML/protobuf readers, ``input_file_*``) are
  refused by name; names sqlglot does not know must be in the session's function list.
- Limits are ResourceExhausted: text length, token nesting (brackets, CASE, prefix-operator
  runs) before parsing, tree depth after; a RecursionError in sqlglot becomes the same error.
- The derived tables are spliced into the tree as pre-built SQL text (``derived.py``), and the
  tree is generated without sqlglot's Hive habit of hoisting nested WITHs (``rewrite.generate``).
"""

from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
from horizon_broker.broker.sql.functions import (
    ALLOWED_TABLE_FUNCTIONS,
    DENIED_FUNCTIONS,
    FunctionPolicy,
)
from horizon_broker.broker.sql.model import (
    KeyLookup,
    Predicate,
    QueryPlan,
    QueryShape,
    RewriteLimits,
    RewriteResult,
    TableRead,
    WorkBudget,
)
from horizon_broker.broker.sql.rewrite import ParsedQuery, bind, parse_query, rewrite

__all__ = [
    "ALLOWED_TABLE_FUNCTIONS",
    "DENIED_FUNCTIONS",
    "Catalog",
    "CatalogTable",
    "FunctionPolicy",
    "KeyLookup",
    "ParsedQuery",
    "Predicate",
    "QueryPlan",
    "QueryShape",
    "RewriteLimits",
    "RewriteResult",
    "TableRead",
    "WorkBudget",
    "bind",
    "parse_query",
    "rewrite",
]

"""Find every reference to a registered table, resolving names the way Spark does."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.catalog import (
    REGISTERED_CATALOGS,
    REGISTERED_NAMESPACES,
    Catalog,
    CatalogTable,
)
from horizon_broker.broker.sql.errors import (
    InvalidChangeWindow,
    InvalidSnapshot,
    TableReferenceNotAllowed,
    UnknownTable,
)
from horizon_broker.broker.sql.functions import (
    ALLOWED_TABLE_FUNCTIONS,
    CHANGE_FEED_FUNCTION,
    function_names,
)
from horizon_broker.broker.sql.state import Reference, ReferenceKind, state_of

#: Spark data-source names usable as a "database" in path queries (parquet.`/path`).
FILE_SOURCES = frozenset(
    {
        "parquet",
        "csv",
        "json",
        "orc",
        "text",
        "avro",
        "binaryfile",
        "delta",
        "xml",
        "libsvm",
        "image",
        "jdbc",
        "hive",
        "file",
    }
)
#: Table-node arguments the substitution carries over; any other (T-SQL hints, MATCH_RECOGNIZE,
#: INDEXED BY...) is refused rather than silently dropped.
_SUPPORTED_TABLE_ARGS = frozenset(
    {"this", "db", "catalog", "alias", "version", "sample", "pivots", "joins", "laterals"}
)


def _written(table: exp.Table) -> str:
    return ".".join(part for part in (table.catalog, table.db, table.name) if part)


def _cte_names(with_: exp.With, limit: int | None) -> set[str]:
    ctes = with_.expressions if limit is None else with_.expressions[:limit]
    return {cte.alias.lower() for cte in ctes}


def is_cte_reference(table: exp.Table, name: str) -> bool:
    """Whether the single-part ``name`` at ``table`` names a CTE in scope, as Spark resolves it.

    Walking up from the reference: a WITH reached from inside its i-th CTE body exposes only the
    CTEs before it (Spark has no forward references, and a non-recursive CTE's own name inside its
    body means the outer table or CTE); under WITH RECURSIVE the CTE sees itself too. A WITH
    reached from its query's body exposes all its CTEs. Inner WITHs shadow outer ones.
    """
    lowered = name.lower()
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):
            index = child.index if isinstance(child, exp.CTE) else None
            if index is None:
                index = len(node.expressions)
            limit = index + 1 if node.args.get("recursive") else index
            if lowered in _cte_names(node, limit):
                return True
            owner = node.parent
            if owner is None:
                return False
            child, node = owner, owner.parent
            continue
        with_ = node.args.get("with_")
        if (
            isinstance(with_, exp.With)
            and with_ is not child
            and lowered in _cte_names(with_, None)
        ):
            return True
        child, node = node, node.parent
    return False


def _registered(table: exp.Table, catalog: Catalog) -> CatalogTable:
    written = _written(table)
    parts = [part for part in (table.catalog, table.db, table.name) if part]
    if table.db.lower() in FILE_SOURCES or any("/" in part or ":" in part for part in parts):
        raise TableReferenceNotAllowed(
            f"file-path table {written} is not allowed: query registered tables by name"
        )
    if table.catalog and table.catalog.lower() not in REGISTERED_CATALOGS:
        raise UnknownTable(
            f"catalog {table.catalog!r} is not available: {written} is not a registered table",
            written,
        )
    if table.db and table.db.lower() not in REGISTERED_NAMESPACES:
        raise UnknownTable(
            f"table {written} is not registered (namespace {table.db!r} is not "
            f"{' or '.join(sorted(REGISTERED_NAMESPACES))})",
            written,
        )
    found = catalog.get(table.name)
    if found is None:
        raise UnknownTable(
            f"table or view {written} is not registered and no CTE of that name is in scope",
            written,
        )
    return found


def _change_feed_table(function: exp.Func, catalog: Catalog) -> CatalogTable:
    arguments = function.expressions
    if len(arguments) not in (2, 3):
        raise InvalidChangeWindow(
            "table_changes takes ('table', from) or ('table', from, to), "
            f"got {len(arguments)} argument(s)"
        )
    name = arguments[0]
    if not (isinstance(name, exp.Literal) and name.is_string):
        raise InvalidChangeWindow(
            "table_changes: the first argument must be the table name as a string"
        )
    parts = [part.strip("`") for part in name.name.split(".")]
    if len(parts) > 2 or (len(parts) == 2 and parts[0].lower() not in REGISTERED_NAMESPACES):
        raise UnknownTable(f"table_changes: table {name.name!r} is not registered", name.name)
    found = catalog.get(parts[-1])
    if found is None:
        raise UnknownTable(f"table_changes: table {name.name!r} is not registered", name.name)
    if not found.upsert:
        raise InvalidChangeWindow(
            f"table_changes: table {found.name} is append-only and has no change history"
        )
    return found


def resolve_references(tree: exp.Expr, catalog: Catalog) -> exp.Expr:
    """Record every reference to a registered table in the tree's rewrite state.

    CTE names shadow tables in their scope; qualified names (``default.t``, ``horizon.t``) never
    name CTEs. Paths, unknown names and table functions other than ``table_changes`` and the pure
    generators are refused. Hints are skipped (their table names are aliases).

    >>> import sqlglot
    >>> from horizon_broker.watermark.catalog import ColumnSpec
    >>> from horizon_broker.broker.sql.state import state_of
    >>> t = CatalogTable("t", (ColumnSpec("k", "int"),), ("k",), True, 10, 0, "__horizon_t_g1")
    >>> tree = sqlglot.parse_one("WITH t AS (SELECT * FROM t) SELECT * FROM t", read="spark")
    >>> refs = state_of(resolve_references(tree, Catalog([t]))).references
    >>> [(ref.table.name, ref.node.find_ancestor(exp.CTE) is not None) for ref in refs]
    [('t', True)]
    """
    state = state_of(tree)
    for node in tree.walk(prune=lambda candidate: isinstance(candidate, exp.Hint)):
        if not isinstance(node, exp.Table):
            continue
        extra = [
            key for key, value in node.args.items() if value and key not in _SUPPORTED_TABLE_ARGS
        ]
        if extra:
            raise TableReferenceNotAllowed(
                f"table reference {node.sql(dialect='spark')!r} uses unsupported clause(s): "
                + ", ".join(extra)
            )
        target = node.this
        if isinstance(target, exp.Func):
            names = function_names(target)
            if CHANGE_FEED_FUNCTION in names:
                table = _change_feed_table(target, catalog)
                state.references.append(
                    Reference(node, table, ReferenceKind.CHANGES, f"table_changes('{table.name}')")
                )
                continue
            if ALLOWED_TABLE_FUNCTIONS.intersection(names):
                continue
            raise TableReferenceNotAllowed(
                f"table-valued function {names[0]}() is not allowed: only table_changes and "
                f"{', '.join(sorted(ALLOWED_TABLE_FUNCTIONS))} may stand in FROM"
            )
        if not isinstance(target, exp.Identifier):
            raise TableReferenceNotAllowed(
                f"table reference {node.sql(dialect='spark')!r} is not a table name"
            )
        if not node.db and not node.catalog and is_cte_reference(node, node.name):
            if node.args.get("version"):
                raise InvalidSnapshot(
                    f"{node.args['version'].sql(dialect='spark')} applies to registered tables, "
                    f"not to the CTE {node.name}"
                )
            continue
        table = _registered(node, catalog)
        state.references.append(Reference(node, table, ReferenceKind.SCAN, _written(node)))
    return tree

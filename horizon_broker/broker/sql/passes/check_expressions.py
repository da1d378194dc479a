"""Refuse constructs and functions that reach outside a read-only query, and over-deep trees."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.derived import RESERVED_PREFIX
from horizon_broker.broker.sql.errors import (
    FunctionNotAllowed,
    QueryTooLarge,
    StatementNotAllowed,
    TableReferenceNotAllowed,
    UnknownFunction,
)
from horizon_broker.broker.sql.functions import (
    DENIED_FUNCTION_CLASSES,
    DENIED_FUNCTIONS,
    FunctionPolicy,
)
from horizon_broker.broker.sql.model import RewriteLimits

_FORBIDDEN_NODES: dict[type[exp.Expr], str] = {
    exp.QueryTransform: "TRANSFORM ... USING (runs an external script)",
    exp.Into: "SELECT ... INTO (creates a table)",
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Merge: "MERGE",
    exp.Create: "CREATE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.Command: "a session command",
    exp.Cache: "CACHE",
    exp.Uncache: "UNCACHE",
    exp.Set: "SET",
    exp.Use: "USE",
    exp.Refresh: "REFRESH",
    exp.LoadData: "LOAD DATA",
    exp.Describe: "DESCRIBE",
    exp.TruncateTable: "TRUNCATE",
}
_FORBIDDEN_TYPES = tuple(_FORBIDDEN_NODES)


def _check_function(node: exp.Func, functions: FunctionPolicy) -> None:
    if isinstance(node, exp.Anonymous):
        name = node.name
        parent = node.parent
        if isinstance(parent, exp.Dot) and parent.expression is node:
            raise FunctionNotAllowed(
                f"qualified function name {parent.sql(dialect='spark')!r} is not allowed: "
                "call built-in functions by their bare name"
            )
        if name.lower() in DENIED_FUNCTIONS:
            raise FunctionNotAllowed(
                f"function {name}() is not allowed: it reaches outside SQL "
                "(runs code, reads files or exposes storage paths)"
            )
        if not functions.is_known(name):
            raise UnknownFunction(
                f"unknown function {name}(): the Spark session has no such function"
            )
    elif type(node) in DENIED_FUNCTION_CLASSES:
        name = type(node).sql_names()[0]
        raise FunctionNotAllowed(
            f"function {name}() is not allowed: it reaches outside SQL "
            "(runs code, reads files or exposes storage paths)"
        )


def check_expressions(
    tree: exp.Expr, *, functions: FunctionPolicy, limits: RewriteLimits
) -> exp.Expr:
    """Walk the tree once (iteratively) checking every node; return the tree unchanged.

    Refuses write/session constructs nested anywhere (``SELECT ... INTO``, ``TRANSFORM USING``),
    CTE names with the reserved prefix (they would shadow the source views), deny-listed functions, functions the session does not know, and trees deeper than the limit.
    Hints are skipped: their arguments name aliases, not functions or tables. A function standing
    as a table (a TVF) is left to ``resolve_references``; its arguments are checked here.

    >>> import sqlglot
    >>> policy = FunctionPolicy.from_names(["abs", "reflect"])
    >>> tree = sqlglot.parse_one("SELECT abs(x) FROM t", read="spark")
    >>> check_expressions(tree, functions=policy, limits=RewriteLimits()) is tree
    True
    >>> check_expressions(sqlglot.parse_one("SELECT reflect('a', 'b')", read="spark"),
    ...                   functions=policy, limits=RewriteLimits())
    Traceback (most recent call last):
    ...
    horizon_broker.broker.sql.errors.FunctionNotAllowed: function reflect() is not allowed: ...
    """
    max_depth = limits.max_tree_depth
    stack: list[tuple[exp.Expr, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise QueryTooLarge(
                f"query expression tree is deeper than the limit of {max_depth} levels"
            )
        if isinstance(node, exp.Hint):
            continue
        if isinstance(node, _FORBIDDEN_TYPES):
            raise StatementNotAllowed(
                f"{_FORBIDDEN_NODES[type(node)] if type(node) in _FORBIDDEN_NODES else type(node).__name__}"
                " is not allowed: queries are read-only"
            )
        if isinstance(node, exp.CTE) and node.alias.lower().startswith(RESERVED_PREFIX):
            raise TableReferenceNotAllowed(
                f"CTE name {node.alias} is not allowed: the prefix {RESERVED_PREFIX} is reserved"
            )
        if isinstance(node, exp.Func) and not (
            isinstance(node.parent, exp.Table) and node.arg_key == "this"
        ):
            _check_function(node, functions)
        depth += 1
        for child in node.iter_expressions():
            stack.append((child, depth))
    return tree

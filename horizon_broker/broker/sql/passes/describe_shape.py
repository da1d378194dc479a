"""Record what later stages ask of a query's shape, so none of them parses the SQL again.

The executor holds batches back only for an ordered result, runs point lookups on a session
tuned for them (whole-stage code generation compiles a class per key literal, which dominates a
lookup), and the result cache keeps no answer that a second run could change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlglot import exp

from horizon_broker.broker.sql.state import ReferenceKind, state_of

MAX_IN_LIST = 1_000
"""More keys than this in one ``IN`` list is a scan, not a lookup."""

NON_DETERMINISTIC = frozenset(
    {
        "rand", "randn", "random", "uniform", "randstr", "uuid", "shuffle",
        "current_timestamp", "current_date", "current_time", "current_timezone", "now",
        "localtimestamp", "unix_timestamp", "curdate", "current_user", "user", "session_user",
        "current_database", "current_schema", "current_catalog", "monotonically_increasing_id",
        "spark_partition_id", "input_file_name", "input_file_block_start",
        "input_file_block_length", "reflect", "java_method", "try_reflect",
    }
)  # fmt: skip
"""Functions whose value may differ between two runs on the same data."""

_NOT_A_LOOKUP = (exp.AggFunc, exp.Window, exp.Join, exp.Group, exp.Having, exp.Union, exp.Lateral)


def describe_shape(tree: exp.Expr) -> exp.Expr:
    """Set the rewrite state's :class:`~horizon_broker.broker.sql.model.QueryShape` (its ``key_lookup`` is
    :func:`~horizon_broker.broker.sql.passes.find_key_lookup`'s). Runs on the caller's tree, after references
    are resolved (their tables give the primary keys) and before they are substituted.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("SELECT * FROM t ORDER BY k", read="spark")
    >>> state_of(describe_shape(tree)).shape.ordered
    True
    """
    state = state_of(tree)
    keys = {
        ref.table.name.lower(): ref.table.primary_key
        for ref in state.references
        if ref.kind is ReferenceKind.SCAN
    }
    census = _census(tree)
    state.shape = replace(
        state.shape,
        ordered=census.ordered,
        point_lookup=_is_key_lookup(tree, keys, census),
        uncacheable=census.uncacheable,
    )
    return tree


@dataclass(frozen=True, slots=True)
class _Census:
    """What one walk of the tree finds for the shape's three questions."""

    ordered: bool
    selects: int
    not_a_lookup: bool
    uncacheable: str | None


def _census(tree: exp.Expr) -> _Census:
    ordered = not_a_lookup = False
    selects = 0
    uncacheable: str | None = None
    for node in tree.walk():
        if isinstance(node, exp.Order):
            ordered = True
        elif isinstance(node, exp.Select):
            selects += 1
        if isinstance(node, _NOT_A_LOOKUP):
            not_a_lookup = True
        if uncacheable is None:
            uncacheable = _uncacheable_node(node)
    return _Census(ordered, selects, not_a_lookup, uncacheable)


def is_ordered(tree: exp.Expr) -> bool:
    """True when the result's row order may be part of the answer (any ORDER BY: Spark keeps a
    sorted subquery's order through a projection, and clients rely on it)."""
    return _census(tree).ordered


def is_key_lookup(tree: exp.Expr, primary_keys: Mapping[str, Sequence[str]]) -> bool:
    """True when ``tree`` selects from one table with every primary-key column fixed to
    literals (``primary_keys`` maps lower-case table names to their key columns). Joins,
    aggregates, windows, set operations and subqueries make a query not a lookup."""
    return _is_key_lookup(tree, primary_keys, _census(tree))


def _is_key_lookup(
    tree: exp.Expr, primary_keys: Mapping[str, Sequence[str]], census: _Census
) -> bool:
    if not isinstance(tree, exp.Select) or tree.args.get("distinct"):
        return False
    if census.not_a_lookup or census.selects != 1:
        return False
    source = tree.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return False
    key = [column.lower() for column in primary_keys.get(source.this.name.lower(), ())]
    where = tree.args.get("where")
    if not key or where is None:
        return False
    return set(key) <= _fixed_columns(where.this)


def uncacheable_reason(tree: exp.Expr) -> str | None:
    """Why the answer of ``tree`` may change at a fixed snapshot, or None.

    >>> import sqlglot
    >>> uncacheable_reason(sqlglot.parse_one("SELECT count(*), now() FROM t", read="spark"))
    'it calls now'
    >>> uncacheable_reason(sqlglot.parse_one("SELECT 'rand()' AS s FROM t", read="spark")) is None
    True
    """
    return _census(tree).uncacheable


def _uncacheable_node(node: exp.Expr) -> str | None:
    if isinstance(node, exp.TableSample):
        return "it calls tablesample"
    if isinstance(node, exp.StrToUnix) and node.this is None:
        return "it calls unix_timestamp"
    if isinstance(node, exp.Func):
        for name in _names(node):
            if name in NON_DETERMINISTIC:
                return f"it calls {name}"
    return None


def _names(node: exp.Func) -> Iterable[str]:
    if isinstance(node, exp.Anonymous):
        return (node.name.lower(),)
    return (name.lower() for name in type(node).sql_names())


def _fixed_columns(condition: exp.Expr) -> set[str]:
    """Columns a conjunction pins to literal values (``c = 1``, ``1 = c``, ``c IN (1, 2)``)."""
    fixed: set[str] = set()
    for part in condition.flatten() if isinstance(condition, exp.And) else (condition,):
        part = part.unnest()
        if isinstance(part, exp.EQ):
            left, right = part.left.unnest(), part.right.unnest()
            if isinstance(right, exp.Column) and _is_literal(left):
                left, right = right, left
            if isinstance(left, exp.Column) and _is_literal(right):
                fixed.add(left.name.lower())
        elif isinstance(part, exp.In) and isinstance(part.this, exp.Column):
            values = part.expressions
            if values and len(values) <= MAX_IN_LIST and all(_is_literal(v) for v in values):
                fixed.add(part.this.name.lower())
    return fixed


def _is_literal(node: exp.Expr) -> bool:
    node = node.unnest()
    if isinstance(node, exp.Neg):
        node = node.this
    return isinstance(node, exp.Literal)

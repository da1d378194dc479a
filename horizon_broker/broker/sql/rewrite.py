"""The rewrite pipeline: client SQL in, Spark SQL that reads only visible versions out.

Pure: a function of the SQL text, the catalog, the limits and the function policy. Each step is a
small pass in ``horizon_broker.broker.sql.passes``; this module only runs them in order and turns the outcome
into a :class:`RewriteResult`. The text is parsed once (:func:`parse_query`); binding it to the
state of the moment (:func:`bind`) works on a copy of the tree, so a query prepared again never
parses again, and the plan carries everything later stages ask of the SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError
from sqlglot.tokenizer_core import Token

from horizon_broker.broker.sql.catalog import Catalog
from horizon_broker.broker.sql.errors import QueryTooLarge, SqlSyntaxError
from horizon_broker.broker.sql.functions import CHANGE_FEED_FUNCTION, FunctionPolicy, function_names
from horizon_broker.broker.sql.model import (
    QueryPlan,
    RewriteLimits,
    RewriteResult,
    TableRead,
    WorkBudget,
)
from horizon_broker.broker.sql.passes.cap_rows import cap_rows
from horizon_broker.broker.sql.passes.check_budget import check_budget
from horizon_broker.broker.sql.passes.check_expressions import check_expressions
from horizon_broker.broker.sql.passes.check_limits import check_limits
from horizon_broker.broker.sql.passes.check_statement_kind import check_statement_kind
from horizon_broker.broker.sql.passes.check_value_sizes import check_value_sizes
from horizon_broker.broker.sql.passes.choose_snapshot import choose_snapshot
from horizon_broker.broker.sql.passes.describe_shape import describe_shape
from horizon_broker.broker.sql.passes.expand_table_changes import expand_table_changes
from horizon_broker.broker.sql.passes.find_key_lookup import find_key_lookup
from horizon_broker.broker.sql.passes.inner_cross_joins import inner_cross_joins
from horizon_broker.broker.sql.passes.name_views import name_views
from horizon_broker.broker.sql.passes.resolve_references import resolve_references
from horizon_broker.broker.sql.passes.snapshot_schema import snapshot_schema
from horizon_broker.broker.sql.passes.substitute_tables import substitute_tables
from horizon_broker.broker.sql.sealing import seal_literals
from horizon_broker.broker.sql.state import Reference, ReferenceKind, RewriteState, state_of

_DIALECT = Spark()
_TOO_DEEP = "query is nested too deeply to be processed"
_DETACHED_ROOT_PARENT = exp.Expression()


def _parse(sql: str, tokens: list[Token]) -> list[exp.Expr | None]:
    try:
        return _DIALECT.parser().parse(tokens, sql)
    except ParseError as error:
        details = error.errors[0] if error.errors else {}
        description = details.get("description") or str(error)
        where = f" at line {details['line']}, column {details['col']}" if "line" in details else ""
        raise SqlSyntaxError(f"SQL syntax error{where}: {description}") from None
    except RecursionError:
        raise QueryTooLarge(_TOO_DEEP) from None


def _plan(state: RewriteState) -> QueryPlan:
    by_table: dict[str, list[Reference]] = {}
    for reference in state.references:
        by_table.setdefault(reference.table.name.lower(), []).append(reference)
    reads = []
    for references in by_table.values():
        table = references[0].table
        scanned = any(ref.kind is ReferenceKind.SCAN for ref in references)
        reads.append(
            TableRead(
                name=table.name,
                upsert=table.upsert,
                source_view=table.main_view,
                snapshot=state.snapshot if scanned and table.upsert else None,
                segments=table.segments,
                files=table.files,
                references=len(references),
                change_windows=tuple(
                    ref.change_window for ref in references if ref.change_window is not None
                ),
                views=table.views,
            )
        )
    return QueryPlan(
        tables_read=tuple(reads),
        snapshot=state.snapshot,
        snapshot_source=state.snapshot_source,
        change_feed=any(ref.kind is ReferenceKind.CHANGES for ref in state.references),
        shape=state.shape,
    )


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """A query's text checked and parsed once (:func:`parse_query`); each time the broker
    prepares it against the current state (again after queueing, or after a fallback) it binds
    a copy of ``tree`` (:func:`bind`), never parsing the text again."""

    sql: str
    tree: exp.Expr
    tables: frozenset[str] | None = None
    """Lower-case names the query may read a table by (None: every table may be read): the
    broker builds its catalog of these alone, so a query's cost does not grow with the tables
    it does not name."""


def tables_named(tree: exp.Expr) -> frozenset[str] | None:
    """Every name ``tree`` could read a registered table by: table names, and the first
    argument of ``table_changes`` (None when that argument is not a string literal).

    >>> import sqlglot
    >>> sorted(tables_named(sqlglot.parse_one(
    ...     "WITH c AS (SELECT * FROM a) SELECT * FROM c JOIN table_changes('db.B', 0) x",
    ...     read="spark")))
    ['a', 'b', 'c']
    """
    names: set[str] = set()
    for table in tree.find_all(exp.Table):
        target = table.this
        if isinstance(target, exp.Func):
            if CHANGE_FEED_FUNCTION not in function_names(target):
                continue
            arguments = target.expressions
            first = arguments[0] if arguments else None
            if not (isinstance(first, exp.Literal) and first.is_string):
                return None
            names.add(first.name.split(".")[-1].strip("`").lower())
        elif isinstance(target, exp.Identifier):
            names.add(target.name.lower())
    return frozenset(names)


def parse_query(
    sql: str,
    *,
    limits: RewriteLimits = RewriteLimits(),  # noqa: B008 - frozen value object
    functions: FunctionPolicy,
) -> ParsedQuery:
    """Check ``sql``'s size, parse it (one tokenization, one parse) and refuse anything that is
    not a single read-only query calling allowed functions."""
    tokens = check_limits(sql, limits)
    tree = check_statement_kind(_parse(sql, tokens))
    tree = check_expressions(tree, functions=functions, limits=limits)
    return ParsedQuery(sql, tree, tables_named(tree))


def bind(
    parsed: ParsedQuery,
    catalog: Catalog,
    *,
    budget: WorkBudget = WorkBudget(),  # noqa: B008 - frozen value object
    pretty: bool = False,
    row_cap: int | None = None,
) -> RewriteResult:
    """Rewrite a parsed query against ``catalog``: resolve its references, check its work
    budget, describe its shape, choose its snapshot and substitute every registered table.
    With ``row_cap``, ``capped_sql`` returns at most ``row_cap + 1`` rows (one more than the
    cap, so the broker can tell a result over it). ``parsed`` is left as it was (the passes
    work on a copy of its tree)."""
    return _bind_tree(
        parsed.tree.copy(), parsed.sql, catalog, budget=budget, pretty=pretty, row_cap=row_cap
    )


def _bind_tree(
    tree: exp.Expr,
    sql_text: str,
    catalog: Catalog,
    *,
    budget: WorkBudget,
    pretty: bool,
    row_cap: int | None,
) -> RewriteResult:
    """:func:`bind` on a tree the passes may consume."""
    state_of(tree).raw_backslash = "\\" in sql_text
    tree = resolve_references(tree, catalog)
    tree = check_budget(tree, budget)
    tree = check_value_sizes(tree, budget)
    tree = describe_shape(tree)
    tree = find_key_lookup(tree)
    tree = choose_snapshot(tree)
    tree = snapshot_schema(tree)
    tree = expand_table_changes(tree)
    tree = inner_cross_joins(tree)  # before the tables become derived ones (the test of a table)
    tree = substitute_tables(tree)
    tree = name_views(tree)  # a derived table that is only its view: the view (plans faster)
    plan = _plan(state_of(tree))
    sql = generate(tree, pretty=pretty)
    capped = generate(cap_rows(tree, row_cap + 1), pretty=pretty) if row_cap is not None else ""
    return RewriteResult(sql=sql, plan=plan, capped_sql=capped)


def rewrite(
    sql: str,
    catalog: Catalog,
    *,
    limits: RewriteLimits = RewriteLimits(),  # noqa: B008 - frozen value object
    budget: WorkBudget = WorkBudget(),  # noqa: B008 - frozen value object
    functions: FunctionPolicy,
    pretty: bool = False,
    row_cap: int | None = None,
) -> RewriteResult:
    """Check ``sql`` and rewrite every registered-table reference to read its visible versions:
    :func:`parse_query` then :func:`bind`.

    Raises a subclass of ``horizon_broker._core.errors.HorizonError`` (InvalidArgument, NotFound,
    FailedPrecondition, ResourceExhausted) naming the problem; never lets a parser recursion
    error escape.
    """
    parsed = parse_query(sql, limits=limits, functions=functions)
    # The parse is this call's own: the passes may consume its tree without a copy.
    return _bind_tree(parsed.tree, sql, catalog, budget=budget, pretty=pretty, row_cap=row_cap)


def generate(tree: exp.Expr, *, pretty: bool = False) -> str:
    """Spark SQL text of ``tree``, keeping nested WITH clauses where they are.

    sqlglot's Spark generator inherits Hive's habit of hoisting nested CTEs to the top of the
    statement, which changes name resolution (an inner CTE shadowing an outer one becomes a
    duplicate name; an inner CTE becomes visible to outer scopes). It only hoists when the root
    has no parent, so the root is given a detached placeholder parent while it is generated; the
    tree is not copied either (it is ours to consume). The text never holds a Spark substitution
    sequence (:mod:`horizon_broker.broker.sql.sealing`).
    """
    tree.parent = _DETACHED_ROOT_PARENT
    try:
        return seal_literals(_DIALECT.generate(tree, copy=False, pretty=pretty))
    except RecursionError:
        raise QueryTooLarge(_TOO_DEEP) from None
    finally:
        tree.parent = None

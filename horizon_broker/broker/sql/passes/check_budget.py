"""Refuse, before Spark runs anything, a query whose work the broker cannot bound.

One shared broker serves every caller from one Spark driver, so a single query must not be able
to occupy it for hours or exhaust its memory. This pass sizes what the text alone decides:
generated rows (``range``), generated arrays and strings (``sequence``, ``array_repeat``,
``repeat``, ``space``, ``lpad``/``rpad``), partition counts (``range``'s fourth argument, the
partitioning hints), how many tables a query reads, how many joins have no join condition, and an
estimate of the rows each ``SELECT`` builds from its sources (joins multiply, generators
multiply). Over a limit: RESOURCE_EXHAUSTED naming the limit. Hints outside an allow-list are
refused (Spark would silently ignore a misspelt one, and some take arguments that reach the
planner unchecked).

Row estimates are upper bounds from what the catalog knows (stored row versions per table), with
sources linked by an equality condition estimated as the larger side (no key statistics) and
unlinked ones as their product.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlglot import exp

from horizon_broker.broker.sql.constants import integer_value
from horizon_broker.broker.sql.errors import OverBudget
from horizon_broker.broker.sql.generators import (
    EXPLODES,
    check_generator,
    generator_rows,
    range_rows,
)
from horizon_broker.broker.sql.grouping import check_grouping_sets
from horizon_broker.broker.sql.hints import check_hint
from horizon_broker.broker.sql.model import WorkBudget
from horizon_broker.broker.sql.passes.check_value_sizes import makes_values_larger
from horizon_broker.broker.sql.state import state_of

_MULTIPLYING = (exp.Join, exp.Lateral, exp.Stack, *EXPLODES)
"""Nodes that make the row estimate of their query level more than its one source's."""
_MULTIPLYING_JOIN_KINDS = frozenset({"", "INNER", "CROSS", "OUTER", "FULL"})


def check_budget(tree: exp.Expr, budget: WorkBudget) -> exp.Expr:
    """Check ``tree`` against ``budget``; return it unchanged.

    Runs after :func:`~horizon_broker.broker.sql.passes.resolve_references`, whose references give each
    registered table's stored row count.

    >>> import sqlglot
    >>> check_budget(sqlglot.parse_one("SELECT * FROM range(10)", read="spark"), WorkBudget())
    Select(...)
    >>> check_budget(sqlglot.parse_one("SELECT * FROM range(1000000000000)", read="spark"),
    ...              WorkBudget())
    Traceback (most recent call last):
    ...
    horizon_broker.broker.sql.errors.OverBudget: range() would generate 1000000000000 rows, over the limit ...
    """
    references = 0
    selects = 0
    multiplies = amplifies = False
    for node in _walk(tree):  # one walk: hints, generators and table references
        if isinstance(node, exp.Hint):
            check_hint(node, budget)
        elif isinstance(node, exp.Group):
            check_grouping_sets(node, budget)
        elif isinstance(node, exp.Table):
            references += 1
            multiplies = multiplies or isinstance(node.this, exp.Func)
        elif isinstance(node, exp.Select):
            selects += 1
        elif isinstance(node, _MULTIPLYING):
            multiplies = True
        else:
            check_generator(node, budget)
            amplifies = amplifies or makes_values_larger(node)
    state_of(tree).amplifies = amplifies
    if references > budget.max_table_references:
        raise OverBudget(
            f"the query reads {references} tables or table functions, over the limit "
            f"[limits].max_table_references = {budget.max_table_references}"
        )
    if selects <= 1 and not multiplies:
        # One query level reading at most one plain source: nothing multiplies rows, so the
        # estimate below could not exceed a limit (a generator's own size is checked above).
        return tree
    rows = {id(ref.node): ref.table.rows for ref in state_of(tree).references}
    columns = {
        id(ref.node): {c.lower() for c in ref.table.column_names}
        for ref in state_of(tree).references
    }
    estimator = _Estimator(budget, rows, columns)
    estimator.query(tree)
    return tree


def _walk(tree: exp.Expr) -> Iterator[exp.Expr]:
    """Every node, without entering hints (whose arguments name aliases, not tables)."""
    return tree.walk(prune=lambda node: isinstance(node, exp.Hint))


# -- row estimates ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Source:
    names: set[str]
    rows: int
    columns: set[str] = field(default_factory=set)


class _UnionFind:
    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, item: int) -> int:
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


class _Estimator:
    """Estimates rows bottom-up and checks each SELECT's estimate and cross joins."""

    def __init__(
        self, budget: WorkBudget, table_rows: dict[int, int], table_columns: dict[int, set[str]]
    ) -> None:
        self.budget = budget
        self.table_rows = table_rows
        self.table_columns = table_columns
        self.ctes: dict[str, int] = {}
        self.cte_columns: dict[str, set[str]] = {}
        self.cross_joins = 0

    def query(self, node: exp.Expr) -> int:
        if isinstance(node, (exp.Subquery, exp.Paren)):
            rows = self.query(node.this)
        else:
            with_ = node.args.get("with_")
            if isinstance(with_, exp.With):
                for cte in with_.expressions:
                    self.ctes[cte.alias.lower()] = self.query(cte.this)
                    self.cte_columns[cte.alias.lower()] = _output_columns(cte.this)
            if isinstance(node, exp.Union):
                rows = self.query(node.this) + self.query(node.expression)
            elif isinstance(node, exp.Intersect):
                rows = min(self.query(node.this), self.query(node.expression))
            elif isinstance(node, exp.Except):
                rows = self.query(node.this)
                self.query(node.expression)
            elif isinstance(node, exp.Select):
                rows = self.select(node)
            else:
                rows = 1
        limit = node.args.get("limit")
        if isinstance(limit, exp.Limit):
            value = integer_value(limit.expression)
            if value is not None:
                rows = min(rows, max(0, value))
        return rows

    def select(self, node: exp.Select) -> int:
        self._subqueries(node)
        joins = node.args.get("joins") or []
        sources = self._sources(node, joins)
        links, conditioned = self._link_joins(joins, sources)
        where = node.args.get("where")
        if isinstance(where, exp.Where):
            self._link(where.this, sources, links, default=None)
        multiplier = self._generated_rows(node)
        self._count_cross_joins(sources, links, conditioned)
        estimate = self._estimate(sources, links, multiplier)
        if node.args.get("group") is None and _aggregates(node) and multiplier == 1:
            return 1
        return estimate if sources else multiplier

    def _sources(self, node: exp.Select, joins: list[exp.Join]) -> list[_Source]:
        """The FROM source, then each joined one."""
        sources: list[_Source] = []
        from_ = node.args.get("from_")
        if isinstance(from_, exp.From):
            sources.append(self.source(from_.this))
        for join in joins:
            sources.append(self.source(join.this))
        return sources

    def _link_joins(
        self, joins: list[exp.Join], sources: list[_Source]
    ) -> tuple[_UnionFind, list[bool]]:
        """Which sources each join's condition links, and which joins have no condition."""
        links = _UnionFind(len(sources))
        conditioned = [True] * len(sources)
        for index, join in enumerate(joins, start=1):
            kind = (join.kind or "").upper()
            if join.args.get("using") or (join.method or "").upper() == "NATURAL":
                links.union(index, index - 1)
            elif join.args.get("on") is not None:
                self._link(join.args["on"], sources, links, default=(index, index - 1))
            elif kind not in _MULTIPLYING_JOIN_KINDS:
                links.union(index, index - 1)  # SEMI / ANTI never multiply
            else:
                conditioned[index] = False
            if kind in ("SEMI", "ANTI"):
                links.union(index, index - 1)
        return links, conditioned

    def _generated_rows(self, node: exp.Select) -> int:
        """How many rows each input row becomes through LATERAL VIEWs and generators."""
        multiplier = 1
        for lateral in node.args.get("laterals") or []:
            multiplier *= generator_rows(lateral.this, self.budget)
        for expression in node.expressions:
            for generator in _own_nodes(expression, (*EXPLODES, exp.Stack)):
                multiplier *= generator_rows(generator, self.budget)
        return multiplier

    def _count_cross_joins(
        self, sources: list[_Source], links: _UnionFind, conditioned: list[bool]
    ) -> None:
        """Count the joins of many rows to many rows that no condition links (cross products)."""
        for index in range(1, len(sources)):
            if conditioned[index] or any(
                links.find(index) == links.find(other) for other in range(index)
            ):
                continue
            if sources[index].rows > 1 and any(source.rows > 1 for source in sources[:index]):
                self.cross_joins += 1
                if self.cross_joins > self.budget.max_cross_joins:
                    raise OverBudget(
                        f"the query has {self.cross_joins} joins without a join condition "
                        f"(cross products), over the limit [limits].max_cross_joins = "
                        f"{self.budget.max_cross_joins}: add a join condition"
                    )

    def _estimate(self, sources: list[_Source], links: _UnionFind, multiplier: int) -> int:
        """Rows built from the sources: the largest source of each linked group, multiplied."""
        components: dict[int, int] = {}
        for index, source in enumerate(sources):
            root = links.find(index)
            components[root] = max(components.get(root, 0), source.rows)
        estimate = multiplier
        for rows in components.values():
            estimate *= max(rows, 1)
        if (len(sources) > 1 or multiplier > 1) and estimate > self.budget.max_estimated_rows:
            raise OverBudget(
                f"the query would build about {estimate:.3g} rows from its sources (joins and "
                f"generators multiply), over the limit [limits].max_estimated_rows = "
                f"{self.budget.max_estimated_rows}: add join conditions or filters"
            )
        return estimate

    def source(self, node: exp.Expr) -> _Source:
        alias = node.alias_or_name.lower() if hasattr(node, "alias_or_name") else ""
        names = {alias} if alias else set()
        if isinstance(node, exp.Table):
            target = node.this
            if id(node) in self.table_rows:
                names.add(node.name.lower())
                return _Source(names, self.table_rows[id(node)], self.table_columns[id(node)])
            if isinstance(target, exp.Anonymous) and target.name.lower() == "range":
                return _Source(names, range_rows(target, self.budget))
            if isinstance(target, exp.Func):
                return _Source(names, generator_rows(target, self.budget))
            names.add(node.name.lower())
            name = node.name.lower()
            return _Source(names, self.ctes.get(name, 1), self.cte_columns.get(name, set()))
        if isinstance(node, (exp.Subquery, exp.Paren)):
            return _Source(names, self.query(node), _output_columns(node.unnest()))
        if isinstance(node, exp.Values):
            return _Source(names, len(node.expressions))
        return _Source(names, 1)

    def _subqueries(self, node: exp.Select) -> None:
        """Estimate (and so check) queries nested in expressions: scalar, IN, EXISTS."""
        for expression in (*node.expressions, node.args.get("where"), node.args.get("having")):
            if expression is None:
                continue
            for nested in _own_nodes(expression, (exp.Subquery, exp.Select)):
                self.query(nested)

    def _link(
        self,
        condition: exp.Expr,
        sources: list[_Source],
        links: _UnionFind,
        default: tuple[int, int] | None,
    ) -> None:
        """Link the sources an equality between their columns relates, also when every branch
        of an OR requires it (TPC-H Q19 repeats its join condition in each branch; Spark
        takes it out as the join's key)."""
        for part in _conjuncts(condition):
            if isinstance(part, exp.Or):
                for pair in _required_pairs(part, sources):
                    links.union(*pair)
                continue
            if not isinstance(part, exp.EQ):
                continue
            left = _owner(part.left.unnest(), sources)
            right = _owner(part.right.unnest(), sources)
            if left is not None and right is not None and left != right:
                links.union(left, right)
            elif default is not None and _is_column(part.left) and _is_column(part.right):
                links.union(*default)


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    """The ANDed parts of ``condition``, parentheses removed."""
    condition = condition.unnest()
    parts = condition.flatten() if isinstance(condition, exp.And) else (condition,)
    return [part.unnest() for part in parts]


def _required_pairs(condition: exp.Expr, sources: list[_Source]) -> set[tuple[int, int]]:
    """The pairs of sources that an equality between their columns links in every row that
    passes ``condition``: of an AND, those of any part; of an OR, those of every branch."""
    condition = condition.unnest()
    if isinstance(condition, exp.Or):
        branches = [_required_pairs(branch, sources) for branch in condition.flatten()]
        return set.intersection(*branches) if branches else set()
    if isinstance(condition, exp.And):
        return set().union(*(_required_pairs(part, sources) for part in _conjuncts(condition)))
    if isinstance(condition, exp.EQ):
        left = _owner(condition.left.unnest(), sources)
        right = _owner(condition.right.unnest(), sources)
        if left is not None and right is not None and left != right:
            return {(min(left, right), max(left, right))}
    return set()


def _output_columns(query: exp.Expr) -> set[str]:
    """The column names a derived table or CTE gives its readers (an equality on them links
    it like a table's own columns: TPC-H Q15 joins supplier to its revenue CTE so)."""
    if isinstance(query, exp.Query):
        return {name.lower() for name in query.named_selects if name}
    return set()


def _is_column(node: exp.Expr) -> bool:
    return isinstance(node.unnest(), exp.Column)


def _owner(node: exp.Expr, sources: list[_Source]) -> int | None:
    """Which source a column belongs to (by qualifier, else by a unique column name)."""
    if not isinstance(node, exp.Column):
        return None
    qualifier = node.table.lower()
    name = node.name.lower()
    matches = [
        index
        for index, source in enumerate(sources)
        if (qualifier in source.names if qualifier else name in source.columns)
    ]
    return matches[0] if len(matches) == 1 else None


def _own_nodes(node: exp.Expr, kinds: tuple[type[exp.Expr], ...]) -> Iterator[exp.Expr]:
    """Nodes of ``kinds`` in ``node`` (itself included) that belong to its own query level:
    nested queries and the insides of a found node are not entered."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, kinds):
            yield current
            continue
        if current is not node and isinstance(current, (exp.Select, exp.Subquery)):
            continue
        stack.extend(current.iter_expressions())


def _aggregates(node: exp.Select) -> bool:
    """Whether the projection aggregates (outside windows), so one row comes out."""
    return any(
        isinstance(found, exp.AggFunc)
        for expression in node.expressions
        for found in _own_nodes(expression, (exp.AggFunc, exp.Window))
    )

"""Which strategy computes a subscription's deltas, and why. Pure: sqlglot analysis of the SQL.

An incremental strategy that is exact for the query wins, the exact diff otherwise (which costs
less depends on the sizes: see the Subscriptions guide's figures):

* ``change_feed``: a filter and projection of one upsert table whose result carries the table's
  primary key, as plain columns (no aggregate, join, window, DISTINCT, LIMIT, subquery): each
  changed key's row at both snapshots comes from the table's change feed.
* ``changed_groups``: a GROUP BY over one upsert table whose groups are in the result and whose
  aggregates are count, sum, avg, min or max: only the groups the change feed touched are re-run.
* ``exact_diff``: everything else (the query run at the new snapshot, diffed with the last answer).

A query reading the validity columns (``validFrom``/``validUntil``, which ``SELECT *`` carries) or
a function whose value changes without the data (``rand()``, ``current_timestamp()``) is left to
the exact diff: the change feed carries neither.

>>> t = TableFacts("accounts", ("id",))
>>> choose("SELECT id, balance FROM accounts WHERE balance > 100", [t]).strategy
'change_feed'
>>> choose("SELECT owner, sum(balance) AS total FROM accounts GROUP BY owner", [t]).strategy
'changed_groups'
>>> choose("SELECT * FROM accounts a JOIN accounts b USING (id)", [t]).text
'exact_diff: the query joins tables'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from horizon_broker._core.errors import InvalidArgument

CHANGE_FEED = "change_feed"
CHANGED_GROUPS = "changed_groups"
EXACT_DIFF = "exact_diff"
NAMES = (CHANGE_FEED, CHANGED_GROUPS, EXACT_DIFF)
"""Every strategy's name, cheapest first."""

VALIDITY = frozenset({"validfrom", "validuntil"})
GROUP_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
_VOLATILE = (exp.Rand, exp.Randn, exp.Uuid, exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime)
_VOLATILE_NAMES = frozenset(
    {"now", "random", "shuffle", "monotonically_increasing_id", "spark_partition_id",
     "input_file_name", "current_timezone", "localtimestamp", "unix_timestamp"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TableFacts:
    """What the chooser needs of a table the query reads."""

    name: str
    primary_key: tuple[str, ...]
    upsert: bool = True


@dataclass(frozen=True, slots=True)
class GroupColumn:
    """One GROUP BY expression (Spark SQL over the table's columns) and its result column."""

    expression: str
    output: str


@dataclass(frozen=True, slots=True)
class Choice:
    """The chosen strategy, the reason in words, and what an incremental one needs."""

    strategy: str
    reason: str
    table: str = ""
    """The one table an incremental strategy reads (its registered name)."""
    alias: str = ""
    """The name the query's columns qualify the table with."""
    primary_key: tuple[str, ...] = ()
    groups: tuple[GroupColumn, ...] = ()

    @property
    def text(self) -> str:
        return f"{self.strategy}: {self.reason}" if self.strategy else self.reason


class Refused(Exception):
    """Why a strategy cannot serve the query (a sentence)."""


def _lower(name: str) -> str:
    return name.lower()


def _parse(sql: str) -> exp.Expr:
    try:
        return sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError as error:
        raise Refused(f"the SQL does not parse ({error})") from None


def volatile(sql: str) -> str | None:
    """The first function of ``sql`` whose value changes without the data (None: none, or the
    SQL does not parse)."""
    try:
        return _volatile(sqlglot.parse_one(sql, read="spark"))
    except sqlglot.errors.ParseError:
        return None


def _volatile(tree: exp.Expr) -> str | None:
    for node in tree.find_all(exp.Func):
        if isinstance(node, _VOLATILE):
            return node.sql(dialect="spark")
        if isinstance(node, exp.Anonymous) and _lower(str(node.this)) in _VOLATILE_NAMES:
            return node.sql(dialect="spark")
    return None


def single_table(tree: exp.Expr, tables: Sequence[TableFacts]) -> tuple[exp.Select, TableFacts]:
    """The query's SELECT and its one upsert table, or :class:`Refused` saying why not."""
    if not isinstance(tree, exp.Select):
        raise Refused("the query is not a single SELECT (a set operation or another statement)")
    if tree.args.get("with_") or tree.args.get("with"):
        raise Refused("the query has a WITH clause")
    if tree.args.get("joins"):
        raise Refused("the query joins tables")
    if tree.args.get("laterals"):
        raise Refused("the query has a LATERAL VIEW")
    if any(node is not tree for node in tree.find_all(exp.Select)):
        raise Refused("the query has a subquery")
    references = list(tree.find_all(exp.Table))
    if len(references) != 1 or not isinstance(references[0].this, exp.Identifier):
        raise Refused("the query does not read exactly one table by name")
    known = {_lower(t.name): t for t in tables}
    facts = known.get(_lower(references[0].name))
    if facts is None or not facts.upsert or not facts.primary_key:
        raise Refused(f"table {references[0].name} is not an upsert table with a primary key")
    volatile = _volatile(tree)
    if volatile is not None:
        raise Refused(f"{volatile} changes without the data changing")
    if any(_lower(column.name) in VALIDITY for column in tree.find_all(exp.Column)) or any(
        isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star)
        for item in tree.expressions
    ):
        raise Refused("the result reads the validity columns (validFrom, validUntil), which the "
                      "change feed does not carry")  # fmt: skip
    return tree, facts


def _table_alias(select: exp.Select) -> str:
    return next(iter(select.find_all(exp.Table))).alias_or_name


def _refuse_modifiers(select: exp.Select) -> None:
    """What neither incremental strategy serves: DISTINCT, LIMIT, windows."""
    if select.args.get("distinct"):
        raise Refused("the query has SELECT DISTINCT")
    if select.args.get("limit") or select.args.get("offset"):
        raise Refused("the query has a LIMIT")
    if select.find(exp.Window) is not None:
        raise Refused("the query has a window function")
    if select.args.get("qualify"):
        raise Refused("the query has a QUALIFY clause")


def _output(item: exp.Expr) -> str:
    """A select item's result column name (an unnamed expression: its text, as Spark names it)."""
    return item.alias_or_name or item.sql(dialect="spark")


def change_feed(sql: str, tables: Sequence[TableFacts]) -> Choice:
    """The change-feed choice for ``sql`` (:class:`Refused` when it cannot serve it)."""
    select, facts = single_table(_parse(sql), tables)
    _refuse_modifiers(select)
    if select.args.get("group") or select.args.get("having") or select.find(exp.AggFunc):
        raise Refused("the query aggregates")
    plain = {
        _lower(item.unalias().name)
        for item in select.expressions
        if isinstance(item.unalias(), exp.Column)
        and _lower(_output(item)) == _lower(item.unalias().name)
    }
    missing = [key for key in facts.primary_key if _lower(key) not in plain]
    if missing:
        raise Refused(f"the result does not carry the primary key column {', '.join(missing)} of "
                      f"table {facts.name} as itself")  # fmt: skip
    outputs = [_lower(_output(item)) for item in select.expressions]
    if len(outputs) != len(set(outputs)):
        raise Refused("two result columns have the same name")
    return Choice(
        CHANGE_FEED,
        f"a filter and projection of upsert table {facts.name} whose result carries its primary "
        f"key ({', '.join(facts.primary_key)})",
        facts.name,
        _table_alias(select),
        facts.primary_key,
    )


def _bare(node: exp.Expr) -> str:
    """An expression's text without column qualifiers (``a.region`` and ``region`` match)."""
    copy = node.copy()
    for column in copy.find_all(exp.Column):
        column.set("table", None)
    return copy.sql(dialect="spark").lower()


def _group_item(group: exp.Expr, items: list[exp.Expr]) -> exp.Expr:
    if isinstance(group, exp.Literal) and not group.is_string:
        number = int(group.this)
        if 1 <= number <= len(items):
            return items[number - 1]
    for item in items:
        if _bare(item.unalias()) == _bare(group):
            return item
    if isinstance(group, exp.Column) and not group.table:
        for item in items:
            if isinstance(item, exp.Alias) and _lower(item.alias) == _lower(group.name):
                return item
    raise Refused(f"GROUP BY {group.sql(dialect='spark')} is not a column of the result, so "
                  "its groups cannot be found in it")  # fmt: skip


def _check_aggregates(select: exp.Select, groups: list[exp.Expr]) -> None:
    """Every aggregate is count, sum, avg, min or max; no other function could be one."""
    having = select.args.get("having")
    for part in [*select.expressions, *([having] if having else [])]:
        if any(part is item for item in groups):
            continue
        for node in part.find_all(exp.Func):
            if isinstance(node, GROUP_AGGREGATES) or node.find_ancestor(*GROUP_AGGREGATES):
                continue
            if isinstance(node, exp.AggFunc):
                raise Refused(f"the query aggregates with {node.sql(dialect='spark')} (changed "
                              "groups serve count, sum, avg, min and max)")  # fmt: skip
            if isinstance(node, exp.Anonymous):
                raise Refused(f"{node.sql(dialect='spark')} may be an aggregate changed groups "
                              "do not serve")  # fmt: skip


def changed_groups(sql: str, tables: Sequence[TableFacts]) -> Choice:
    """The changed-groups choice for ``sql`` (:class:`Refused` when it cannot serve it)."""
    select, facts = single_table(_parse(sql), tables)
    _refuse_modifiers(select)
    group = select.args.get("group")
    if group is None or not group.expressions:
        if select.find(exp.AggFunc) is not None:
            raise Refused("the query aggregates without GROUP BY (one group: the whole table)")
        raise Refused("the query has no GROUP BY")
    if any(group.args.get(kind) for kind in ("rollup", "cube", "grouping_sets")):
        raise Refused("the query groups by ROLLUP, CUBE or GROUPING SETS")
    items = list(select.expressions)
    chosen = [_group_item(expression, items) for expression in group.expressions]
    _check_aggregates(select, chosen)
    outputs = [_lower(_output(item)) for item in items]
    if len(outputs) != len(set(outputs)):
        raise Refused("two result columns have the same name")
    columns = tuple(
        GroupColumn(item.unalias().sql(dialect="spark"), _output(item))
        for item in dict.fromkeys(chosen)  # GROUP BY 1, region: one column
    )
    return Choice(
        CHANGED_GROUPS,
        f"a GROUP BY over upsert table {facts.name} with count, sum, avg, min or max: only the "
        f"groups the change feed touched are re-run",
        facts.name,
        _table_alias(select),
        facts.primary_key,
        columns,
    )


_CHOOSERS = {CHANGE_FEED: change_feed, CHANGED_GROUPS: changed_groups}


def check_name(name: str) -> str:
    """A requested strategy's name, checked (empty: the broker chooses)."""
    if name and name not in NAMES:
        raise InvalidArgument(
            f"strategy must be one of {', '.join(NAMES)} (empty: the broker chooses), got {name!r}"
        )
    return name


def _is_grouped(sql: str) -> bool:
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError:
        return False
    return bool(tree.args.get("group")) or tree.find(exp.AggFunc) is not None


def choose(sql: str, tables: Sequence[TableFacts], forced: str = "") -> Choice:
    """The strategy for ``sql`` over ``tables`` (the upsert tables it reads): ``forced`` when
    named (INVALID_ARGUMENT saying why it cannot serve the query), else the cheapest exact one."""
    check_name(forced)
    if forced == EXACT_DIFF:
        return Choice(EXACT_DIFF, "the subscription asked for it")
    if forced:
        try:
            return _CHOOSERS[forced](sql, tables)
        except Refused as why:
            raise InvalidArgument(f"strategy {forced} cannot serve this query: {why}") from None
    reasons: dict[str, str] = {}
    for name, chooser in _CHOOSERS.items():
        try:
            return chooser(sql, tables)
        except Refused as why:
            reasons[name] = str(why)
    relevant = reasons[CHANGED_GROUPS] if _is_grouped(sql) else reasons[CHANGE_FEED]
    return Choice(EXACT_DIFF, relevant)

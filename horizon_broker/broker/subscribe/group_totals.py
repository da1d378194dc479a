"""Changed groups without re-running the query: new totals from the held ones plus the feed's.

For a GROUP BY whose every other column is ``count(*)``, ``count(x)`` or ``sum(x)`` (no
DISTINCT, no HAVING), a group's totals at ``to`` are its totals at ``from`` plus what the change
feed of ``(from, to]`` adds: each version that began in the window (``insert``,
``update_postimage``) counts once, each one that ended (``delete``, ``update_preimage``) counts
minus once, a version that began and ended inside the window cancels out, and the query's WHERE
applies to every one. One query over the feed (:func:`contribution_events_sql`) gives each
change's signed contributions, summed by group in Arrow; nothing re-reads the table. The held answer carries, per group, its row
count and each sum's count of non-null values (hidden columns of the first query,
:func:`held_sql`): a group whose rows all left is a ``delete``, a sum whose values all left is
NULL, as the query gives them.

Exact only where addition is: sums over integers or decimals (a float sum depends on the order
of its terms), group values that compare as Python's equality does (no float group column). A
query outside that (min, max, avg, HAVING, a float) uses :class:`.changed_groups.ChangedGroups`,
which re-runs the query for the touched groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from .changed_groups import ChangedGroups, group_rows
from .choose import CHANGED_GROUPS, Choice
from .diff import Delta, diff, frozen
from .incremental_sql import feed_sql
from .snapshot_sql import at_snapshot

if TYPE_CHECKING:
    from .strategy import Reads

ROWS = "__subscribe_rows"
"""The hidden column of each group's row count."""
_ENDS = "_change_type IN ('delete', 'update_preimage')"
COUNT_ROWS, COUNT, SUM = "count_rows", "count", "sum"


@dataclass(frozen=True, slots=True)
class Total:
    """One aggregate column of the result: its name, kind and argument (Spark SQL)."""

    position: int
    """Its place among the result's columns (Spark names an unaliased one its own way)."""
    kind: str
    argument: str = ""

    def non_null(self, number: int) -> str:
        """The hidden column counting the argument's non-null values (a sum's)."""
        return f"__subscribe_n{number}"


def _total(item: exp.Expr, position: int) -> Total | None:
    node = item.unalias()
    if isinstance(node, exp.Count) and not isinstance(node.this, exp.Distinct):
        if node.this is None or isinstance(node.this, exp.Star):
            return Total(position, COUNT_ROWS)
        return Total(position, COUNT, node.this.sql(dialect="spark"))
    if isinstance(node, exp.Sum) and not isinstance(node.this, exp.Distinct):
        return Total(position, SUM, node.this.sql(dialect="spark"))
    return None


def totals_of(sql: str, choice: Choice) -> tuple[Total, ...] | None:
    """The query's aggregate columns when every one is a count or a sum and there is no HAVING
    (None: the touched groups are re-run instead)."""
    tree = sqlglot.parse_one(sql, read="spark")
    if not isinstance(tree, exp.Select) or tree.args.get("having"):
        return None
    groups = {group.output.lower() for group in choice.groups}
    totals = []
    for position, item in enumerate(tree.expressions):
        if (item.alias_or_name or item.sql(dialect="spark")).lower() in groups:
            continue
        total = _total(item, position)
        if total is None:
            return None
        totals.append(total)
    return tuple(totals)


def held_sql(sql: str, totals: tuple[Total, ...]) -> str:
    """``sql`` with the hidden columns the totals need: the row count, each sum's non-null
    count."""
    tree = sqlglot.parse_one(sql, read="spark")
    assert isinstance(tree, exp.Select), "totals_of let only a SELECT through"
    hidden = [f"count(*) AS {ROWS}"] + [
        f"count({t.argument}) AS {t.non_null(n)}" for n, t in enumerate(totals) if t.kind == SUM
    ]
    extra = [sqlglot.parse_one(h, read="spark") for h in hidden]
    return tree.select(*extra, append=True).sql(dialect="spark")


def _contribution_columns(choice: Choice, totals: tuple[Total, ...]) -> list[tuple[str, str]]:
    """One change's groups and signed contributions, as (expression, name): the groups
    (``_subscribe_g<n>``), then :data:`ROWS`, each total and a sum's non-null count."""
    sign = f"CASE WHEN {_ENDS} THEN -1 ELSE 1 END"
    columns = [(g.expression, f"_subscribe_g{n}") for n, g in enumerate(choice.groups)]
    columns.append((sign, ROWS))
    for number, total in enumerate(totals):
        if total.kind == COUNT_ROWS:
            columns.append((sign, f"_subscribe_t{number}"))
            continue
        present = f"CASE WHEN ({total.argument}) IS NULL THEN 0 ELSE {sign} END"
        if total.kind == COUNT:
            columns.append((present, f"_subscribe_t{number}"))
        else:
            columns.append((f"{sign} * ({total.argument})", f"_subscribe_t{number}"))
            columns.append((present, total.non_null(number)))
    return columns


def _where(sql: str) -> str:
    where = sqlglot.parse_one(sql, read="spark").args.get("where")
    return f" WHERE {where.this.sql(dialect='spark')}" if where is not None else ""


def contribution_events_sql(
    sql: str, choice: Choice, totals: tuple[Total, ...], start: int, end: int
) -> str:
    """Each change in ``(start, end]`` that passes the query's WHERE, one row: its groups and
    its signed contributions (:func:`_contribution_columns`). Arrow sums them by group
    (:func:`summed`), which spares Spark a shuffle by group."""
    columns = ", ".join(f"{e} AS {name}" for e, name in _contribution_columns(choice, totals))
    return f"SELECT {columns} FROM {feed_sql(choice, start, end)}{_where(sql)}"


def summed(events: pa.Table, groups: int) -> pa.Table:
    """Each touched group's signed change of its row count and of each total: the events'
    contributions summed by group (NULL where every value was NULL, as Spark's ``sum``; a
    decimal is summed at precision 38, Spark's bound)."""
    keys = [f"_subscribe_g{n}" for n in range(groups)]
    values = [name for name in events.column_names if name not in keys]
    totals = events.group_by(keys, use_threads=False).aggregate([(name, "sum") for name in values])
    return totals.select(keys + [f"{v}_sum" for v in values]).rename_columns(keys + values)


def exact_types(answer: pa.Schema, choice: Choice, totals: tuple[Total, ...]) -> bool:
    """Whether adding keeps the answer exact: no float sum, no float group column."""
    names = {name.lower(): name for name in answer.names}
    for group in choice.groups:
        if pa.types.is_floating(answer.field(names[group.output.lower()]).type):
            return False
    return not any(
        total.kind == SUM and not _exact_sum(answer.field(total.position).type) for total in totals
    )


def _exact_sum(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_decimal(kind))


def _add(held: Any, change: Any) -> Any:
    return (held or 0) + (change or 0)


class GroupTotals:
    """Deltas of a count-and-sum GROUP BY from the held totals and the change feed's."""

    name = CHANGED_GROUPS

    def __init__(self, choice: Choice, reads: Reads, totals: tuple[Total, ...]) -> None:
        self._choice, self._reads, self._totals = choice, reads, totals
        self._groups: dict[tuple, dict[str, Any]] = {}
        self._schema: pa.Schema | None = None
        self._visible: list[str] = []
        self._group_names: list[str] = []
        self._at: int | None = None
        self._rerun: ChangedGroups | None = None
        """Set when the answer's types make addition inexact: the touched groups re-run."""

    def start(self, snapshot: int) -> pa.Table:
        sql = at_snapshot(held_sql(self._reads.sql, self._totals), self._reads.tables, snapshot)
        held = self._reads.query(sql)
        self._visible = held.column_names[: len(held.column_names) - self._hidden_count()]
        answer = held.select(self._visible)
        names = {name.lower(): name for name in answer.column_names}
        if not all(g.output.lower() in names for g in self._choice.groups) or not exact_types(
            answer.schema, self._choice, self._totals
        ):
            self._rerun = ChangedGroups(self._choice, self._reads)
            self._rerun.resume_from(snapshot, answer)
            return answer
        self._schema, self._at = held.schema, snapshot
        self._group_names = [names[group.output.lower()] for group in self._choice.groups]
        rows = held.to_pylist()
        self._groups = dict(zip(group_rows(held, self._group_names), rows, strict=True))
        return answer

    def resume(self, snapshot: int) -> None:
        self.start(snapshot)

    def _hidden_count(self) -> int:
        return 1 + sum(total.kind == SUM for total in self._totals)

    def advance(self, to: int) -> Delta:
        if self._rerun is not None:
            return self._rerun.advance(to)
        assert self._at is not None and self._schema is not None, "start() or resume() first"
        sql = contribution_events_sql(self._reads.sql, self._choice, self._totals, self._at, to)
        changes = summed(self._reads.query(sql), len(self._choice.groups)).to_pylist()
        before, after = [], []
        for change in changes:
            values = tuple(
                frozen(change[f"_subscribe_g{n}"]) for n in range(len(self._group_names))
            )
            old = self._groups.get(values)
            new = self._added(values, old, change)
            if old is not None:
                before.append(old)
            if new is None:
                self._groups.pop(values, None)
            else:
                self._groups[values] = new
                after.append(new)
        self._at = to
        visible = pa.schema([self._schema.field(name) for name in self._visible])
        return diff(
            pa.Table.from_pylist(before, schema=self._schema).select(self._visible),
            pa.Table.from_pylist(after, schema=self._schema).select(self._visible).cast(visible),
            self._reads.key,
        )

    def _added(self, values: tuple, old: dict[str, Any] | None, change: dict[str, Any]) -> Any:
        """The group's new row (None: it has no rows left)."""
        rows = _add(old and old[ROWS], change[ROWS])
        if rows == 0:
            return None
        new = dict(zip(self._group_names, values, strict=True))
        new[ROWS] = rows
        for number, total in enumerate(self._totals):
            name = self._visible[total.position]
            added = _add(old and old[name], change[f"_subscribe_t{number}"])
            if total.kind == SUM:
                count = total.non_null(number)
                new[count] = _add(old and old[count], change[count])
                added = added if new[count] else None
            new[name] = added
        return new

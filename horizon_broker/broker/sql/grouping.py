"""How many grouping sets a GROUP BY asks for: Spark copies every input row once per set, so
``CUBE`` over 18 expressions (262,144 sets) turns a small table into hours of work."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.errors import OverBudget
from horizon_broker.broker.sql.model import WorkBudget


def grouping_sets(group: exp.Group) -> int:
    """The number of grouping sets of ``group`` (1 for a plain GROUP BY).

    >>> import sqlglot
    >>> group = sqlglot.parse_one("SELECT 1 FROM t GROUP BY a, CUBE(b, c), ROLLUP(d, e)").args
    >>> grouping_sets(group["group"])
    12
    """
    count = 1
    for element in group.expressions:
        count *= _sets_of(element)
    plain = len(group.expressions)
    if group.args.get("cube"):
        count *= 2**plain
    if group.args.get("rollup"):
        count *= plain + 1
    return count


def _sets_of(element: exp.Expr) -> int:
    if isinstance(element, exp.Cube):
        return 1 << len(element.expressions)
    if isinstance(element, exp.Rollup):
        return len(element.expressions) + 1
    if isinstance(element, exp.GroupingSets):
        return max(1, sum(_sets_of(member) for member in element.expressions))
    if isinstance(element, (exp.Tuple, exp.Paren)):
        count = 1
        for part in element.expressions if isinstance(element, exp.Tuple) else [element.this]:
            count *= _sets_of(part)
        return count
    return 1


def check_grouping_sets(group: exp.Group, budget: WorkBudget) -> None:
    """OverBudget when ``group`` asks for more sets than ``[limits].max_grouping_sets``."""
    count = grouping_sets(group)
    if count > budget.max_grouping_sets:
        raise OverBudget(
            f"GROUP BY asks for {count} grouping sets (each input row is copied once per set), "
            f"over the limit [limits].max_grouping_sets = {budget.max_grouping_sets}"
        )

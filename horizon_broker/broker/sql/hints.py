"""Which optimizer hints a query may carry, and the partition counts they may ask for.

Spark silently ignores a misspelt hint, and some take arguments that reach the planner
unchecked, so only an allow-list passes; partitioning hints' counts are part of the work budget.
"""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.constants import integer_value
from horizon_broker.broker.sql.errors import HintNotAllowed, OverBudget
from horizon_broker.broker.sql.model import WorkBudget

JOIN_HINTS = frozenset(
    {
        "BROADCAST",
        "BROADCASTJOIN",
        "MAPJOIN",
        "MERGE",
        "SHUFFLE_MERGE",
        "MERGEJOIN",
        "SHUFFLE_HASH",
        "SHUFFLE_REPLICATE_NL",
    }
)
PARTITION_HINTS = frozenset({"COALESCE", "REPARTITION", "REPARTITION_BY_RANGE", "REBALANCE"})
ALLOWED_HINTS = JOIN_HINTS | PARTITION_HINTS


# -- hints --------------------------------------------------------------------------------------


def _hint_name(node: exp.Expr) -> str:
    if isinstance(node, exp.JoinHint):
        return str(node.this).upper()
    if isinstance(node, exp.Anonymous):
        return node.name.upper()
    if isinstance(node, exp.Var):
        return node.name.upper()
    if isinstance(node, exp.Func):
        return type(node).sql_names()[0].upper()
    return node.sql(dialect="spark")


def _hint_arguments(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Var):
        return []
    return [arg for arg in node.iter_expressions()]


def check_hint(hint: exp.Hint, budget: WorkBudget) -> None:
    for entry in hint.expressions:
        name = _hint_name(entry)
        if name not in ALLOWED_HINTS:
            raise HintNotAllowed(
                f"hint {name} is not allowed: use one of {', '.join(sorted(ALLOWED_HINTS))}"
            )
        arguments = _hint_arguments(entry)
        for position, argument in enumerate(arguments):
            if isinstance(argument, (exp.Table, exp.Column, exp.Identifier)):
                continue
            number = integer_value(argument)
            if name in PARTITION_HINTS and position == 0 and number is not None:
                check_partitions(number, f"hint {name}", budget)
                continue
            raise HintNotAllowed(
                f"hint {name} takes table or column names"
                + (" and a partition count first" if name in PARTITION_HINTS else "")
                + f", not {argument.sql(dialect='spark')}"
            )


def check_partitions(count: int, what: str, budget: WorkBudget) -> None:
    if not 1 <= count <= budget.max_partitions:
        raise OverBudget(
            f"{what} asks for {count} partitions: it must be between 1 and the limit "
            f"[limits].max_partitions = {budget.max_partitions}"
        )

"""How big each generator makes its output: rows of ``range``, elements of ``sequence`` and
``array_repeat``, characters of ``repeat`` / ``space`` / ``lpad`` / ``rpad``; each checked against
the work budget, and refused when the data decides it (then it cannot be bounded before the
query runs)."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.constants import instant_seconds, integer_value, interval_seconds
from horizon_broker.broker.sql.errors import OverBudget
from horizon_broker.broker.sql.hints import check_partitions
from horizon_broker.broker.sql.model import WorkBudget

EXPLODES = (exp.Explode, exp.Posexplode, exp.ExplodeOuter, exp.Inline)


def check_generator(node: exp.Expr, budget: WorkBudget) -> None:
    if isinstance(node, exp.GenerateSeries):
        sequence_length(node, budget)
    elif isinstance(node, exp.Anonymous):
        name = node.name.lower()
        if name == "array_repeat":
            array_repeat_length(node, budget)
        elif name == "range":
            range_rows(node, budget)
    elif isinstance(node, exp.Repeat):
        _string_length(node.args.get("times"), "repeat()", budget)
    elif isinstance(node, exp.Space):
        _string_length(node.this, "space()", budget)
    elif isinstance(node, exp.Pad):
        _string_length(node.expression, "lpad()" if node.args.get("is_left") else "rpad()",
                       budget)  # fmt: skip


def _not_constant(what: str, limit: str, value: int, hint: str) -> OverBudget:
    return OverBudget(
        f"{what} is computed from the data, so its size cannot be bounded before the query "
        f"runs (the limit [limits].{limit} = {value} needs constant arguments); {hint}"
    )


def sequence_length(node: exp.GenerateSeries, budget: WorkBudget) -> int:
    """How many elements ``sequence(start, stop[, step])`` makes (an upper bound)."""
    limit = budget.max_array_elements
    start, end, step = node.args.get("start"), node.args.get("end"), node.args.get("step")
    length: int | None = None
    first, last = integer_value(start), integer_value(end)
    if first is not None and last is not None:
        stride = integer_value(step) if step is not None else (1 if last >= first else -1)
        if stride:
            length = max(0, (last - first) // stride + 1)
    else:
        low, high = instant_seconds(start), instant_seconds(end)
        stride_s = interval_seconds(step) if step is not None else 86400.0
        if low is not None and high is not None and stride_s:
            length = max(0, int(abs(high - low) // abs(stride_s)) + 1)
    if length is None:
        raise _not_constant(
            "sequence() with these bounds",
            "max_array_elements",
            limit,
            "write constant bounds, or join with range(...) for a series per row",
        )
    if length > limit:
        raise OverBudget(
            f"sequence() would make an array of {length} elements, over the limit "
            f"[limits].max_array_elements = {limit}"
        )
    return length


def array_repeat_length(node: exp.Anonymous, budget: WorkBudget) -> int:
    limit = budget.max_array_elements
    count = integer_value(node.expressions[1]) if len(node.expressions) == 2 else None
    if count is None:
        raise _not_constant("array_repeat()'s count", "max_array_elements", limit, "use a constant")
    if count > limit:
        raise OverBudget(
            f"array_repeat() would make an array of {count} elements, over the limit "
            f"[limits].max_array_elements = {limit}"
        )
    return max(0, count)


def _string_length(argument: exp.Expr | None, what: str, budget: WorkBudget) -> None:
    limit = budget.max_string_length
    length = integer_value(argument)
    if length is None:
        raise _not_constant(f"{what}'s length", "max_string_length", limit, "use a constant")
    if length > limit:
        raise OverBudget(
            f"{what} would make a string of {length} characters, over the limit "
            f"[limits].max_string_length = {limit}"
        )


def range_rows(node: exp.Anonymous, budget: WorkBudget) -> int:
    """How many rows ``range([start,] end[, step[, partitions]])`` generates."""
    values = [integer_value(argument) for argument in node.expressions]
    if not 1 <= len(values) <= 4 or any(value is None for value in values):
        raise OverBudget(
            "range() takes one to four constant integers (start, end, step, partitions), "
            f"got {node.sql(dialect='spark')}: its rows cannot be bounded before it runs"
        )
    numbers = [int(value) for value in values if value is not None]
    start, end = (0, numbers[0]) if len(numbers) == 1 else (numbers[0], numbers[1])
    step = numbers[2] if len(numbers) >= 3 else 1
    if len(numbers) == 4:
        check_partitions(numbers[3], "range()", budget)
    if step == 0:
        return 0  # Spark refuses it with its own error
    rows = max(0, -((start - end) // step))
    if rows > budget.max_generated_rows:
        raise OverBudget(
            f"range() would generate {rows} rows, over the limit "
            f"[limits].max_generated_rows = {budget.max_generated_rows}"
        )
    return rows


def generator_rows(node: exp.Expr, budget: WorkBudget) -> int:
    """Rows one call of a generator makes per input row (1 when the data decides)."""
    if isinstance(node, exp.Stack):
        return max(1, integer_value(node.this) or 1)
    if isinstance(node, EXPLODES):
        source = node.this
        if isinstance(source, exp.GenerateSeries):
            return sequence_length(source, budget)
        if isinstance(source, exp.Array):
            return len(source.expressions)
        if isinstance(source, exp.Anonymous) and source.name.lower() == "array_repeat":
            return array_repeat_length(source, budget)
    return 1

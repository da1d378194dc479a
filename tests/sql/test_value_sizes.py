"""A budget that multiplies: sizes compose through nesting (lambdas, aggregate steps,
concatenations, format widths, grouping sets), and a value over a limit is refused before Spark
runs, naming the limit it broke; a value within the limits passes."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker.broker.sql.errors import OverBudget
from horizon_broker.broker.sql.model import WorkBudget
from horizon_broker.broker.sql.passes.check_budget import check_budget
from horizon_broker.broker.sql.passes.check_value_sizes import check_value_sizes


def _check(sql: str, budget: WorkBudget = WorkBudget()) -> None:  # noqa: B008
    tree = check_budget(sqlglot.parse_one(sql, read="spark"), budget)
    check_value_sizes(tree, budget)


@pytest.mark.parametrize(
    ("sql", "limit"),
    [
        ("SELECT transform(sequence(1, 90000), x -> repeat('q', 90000))", "max_value_size"),
        ("SELECT aggregate(sequence(1, 40), 'ab', (acc, x) -> concat(acc, acc))", "string_length"),
        ("SELECT aggregate(sequence(1, 100000), 'a', (acc, x) -> acc || acc)", "string_length"),
        ("SELECT format_string('%999999999d', 1)", "max_string_length"),
        ("SELECT printf('%.999999999f', 1.5)", "max_string_length"),
        ("SELECT format_string(owner, 1) FROM t", "needs a constant format"),
        ("SELECT concat(repeat('a', 6000000), repeat('b', 6000000))", "max_string_length"),
        ("SELECT repeat('a', 5000000) || repeat('b', 5000001)", "max_string_length"),
        ("SELECT repeat(repeat('ab', 100000), 100)", "max_string_length"),
        ("SELECT concat_ws(repeat(',', 1000), sequence(1, 100000))", "max_string_length"),
        (
            "SELECT size(flatten(array_repeat(array_repeat('z', 60000), 60000)))",
            "max_array_elements",
        ),
        ("SELECT array_repeat(repeat('x', 1000000), 1000)", "max_value_size"),
        ("SELECT regexp_replace(repeat('a', 100000), '', repeat('b', 1000))", "string_length"),
        (
            "SELECT zip_with(sequence(1, 100000), sequence(1, 10), (a, b) -> repeat('x', 5000))",
            "max_value_size",
        ),
        ("SELECT (SELECT repeat('x', 6000000)) || (SELECT repeat('y', 6000000))", "string"),
        ("SELECT count(*) FROM t GROUP BY CUBE(a, b, c, d, e, f, g, h, i, j, k)", "grouping_sets"),
        (
            "SELECT count(*) FROM t GROUP BY a, b, c, d, e, f, g, h, i, j, k WITH CUBE",
            "max_grouping_sets",
        ),
    ],
)
def test_a_value_whose_size_multiplies_past_a_limit_is_refused_naming_it(sql, limit):
    with pytest.raises(OverBudget, match=limit):
        _check(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(DISTINCT sha2(repeat(owner, 100000), 256)) AS n FROM big",
        "SELECT transform(sequence(1, 1000), x -> repeat('q', 1000))",
        "SELECT aggregate(sequence(1, 1000000), 0L, (acc, x) -> acc + x)",
        "SELECT aggregate(sequence(1, 1000), '', (acc, x) -> concat(acc, 'ab'))",
        "SELECT format_string('%10d|%-20s', 42, owner) FROM t",
        "SELECT concat(repeat('a', 4000000), repeat('b', 4000000))",
        "SELECT flatten(array_repeat(array_repeat('z', 1000), 1000))",
        "SELECT count(*) FROM t GROUP BY CUBE(a, b, c, d, e, f, g, h, i, j)",
        "SELECT count(*) FROM t GROUP BY ROLLUP(a, b, c, d, e, f, g, h, i, j, k, l)",
        "SELECT transform(tags, t -> upper(t)) FROM t",
    ],
)
def test_a_value_within_the_limits_passes(sql):
    _check(sql)


# -- soundness: the bound is never below the real size ----------------------------------------

LEAF = st.sampled_from(["'a'", "'xyz'", "''"])


def _expressions() -> st.SearchStrategy[str]:
    return st.recursive(
        LEAF,
        lambda inner: st.one_of(
            st.tuples(inner, st.integers(0, 6)).map(lambda t: f"repeat({t[0]}, {t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"concat({t[0]}, {t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"({t[0]} || {t[1]})"),
            st.tuples(inner, st.integers(0, 9)).map(lambda t: f"lpad({t[0]}, {t[1]}, 'p')"),
            st.tuples(inner, st.integers(0, 4)).map(
                lambda t: (
                    f"array_join(transform(array_repeat({t[0]}, {t[1]}), x -> concat(x, x)), '')"
                )
            ),
            st.tuples(inner, st.integers(0, 5)).map(
                lambda t: (
                    f"aggregate(sequence(1, {t[1]}), {t[0]}, (acc, x) -> concat(acc, 'b'))"
                    if t[1]
                    else t[0]
                )
            ),
        ),
        max_leaves=6,
    )


def _evaluate(sql: str) -> str:
    """The value Spark would compute, from a tiny Python evaluator of the same functions."""
    node = sqlglot.parse_one(f"SELECT {sql}", read="spark").expressions[0]
    return _value(node)


def _value(node):  # type: ignore[no-untyped-def]
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _value(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else int(node.this)
    if isinstance(node, exp.Repeat):
        return _value(node.this) * _value(node.args["times"])
    if isinstance(node, (exp.Concat, exp.DPipe)):
        parts = node.expressions if isinstance(node, exp.Concat) else [node.this, node.expression]
        return "".join(_value(part) for part in parts)
    if isinstance(node, exp.Pad):
        text, width = _value(node.this), _value(node.expression)
        return ("p" * width + text)[-width:] if width and len(text) < width else text[:width]
    if isinstance(node, exp.ArrayToString):
        return "".join(_value(node.this))
    if isinstance(node, exp.Transform):
        return [value + value for value in _value(node.this)]
    if isinstance(node, exp.Anonymous) and node.name.lower() == "array_repeat":
        return [_value(node.expressions[0])] * _value(node.expressions[1])
    if isinstance(node, exp.Reduce):
        steps = _value(node.this.args["end"])
        return _value(node.args["initial"]) + "b" * steps
    raise AssertionError(f"no evaluator for {node.sql('spark')}")


@settings(max_examples=300, deadline=None)
@given(expression=_expressions())
def test_any_value_longer_than_the_limit_is_refused(expression):
    length = len(_evaluate(expression))
    if length == 0 or not any(f in expression for f in ("repeat", "lpad", "aggregate")):
        return  # literals are as long as the text that holds them: the SQL length limit bounds it
    tight = WorkBudget(max_string_length=length - 1, max_value_size=length - 1)
    with pytest.raises(OverBudget):
        _check(f"SELECT {expression}", tight)

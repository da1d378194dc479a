"""The text the rewriter hands Spark never holds a substitution sequence (``${``): inside string
literals it is written as ``\\u0024{`` (which parses back to the same value), anywhere else the
query is refused."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.sql.sealing import seal_literals

TRICKY = st.text(
    alphabet=st.sampled_from(["$", "{", "}", "'", '"', "\\", "a", "n", "u", "0", " ", "é", "\n"]),
    max_size=24,
)


def _literal(value: str) -> str:
    return exp.Literal.string(value).sql(dialect="spark")


@settings(max_examples=300, deadline=None)
@given(values=st.lists(TRICKY, min_size=1, max_size=3))
def test_sealed_text_has_no_substitution_sequence_and_parses_back_to_the_same_literals(values):
    sql = "SELECT " + ", ".join(_literal(value) for value in values)
    sealed = seal_literals(sql)
    assert "${" not in sealed
    parsed = sqlglot.parse_one(sealed, read="spark")
    assert [literal.this for literal in parsed.find_all(exp.Literal)] == values


def test_a_dollar_escaped_by_the_caller_is_sealed_without_its_escape():
    assert seal_literals("SELECT 'x\\${nope}' AS a") == "SELECT 'x\\u0024{nope}' AS a"
    assert seal_literals("SELECT 'x\\\\${nope}' AS a") == "SELECT 'x\\\\\\u0024{nope}' AS a"


def test_text_without_substitution_sequences_is_returned_as_it_is():
    sql = "SELECT '$x', '{y}', `$` FROM t /* $ { */"
    assert seal_literals(sql) is sql


@pytest.mark.parametrize(
    "sql",
    ["SELECT `a${x}` FROM t", "SELECT 1 /* ${env:HOME} */", "SELECT 1 AS `${x}`"],
)
def test_a_substitution_sequence_outside_a_string_literal_is_refused(sql):
    with pytest.raises(InvalidArgument, match=r"'\$\{' outside a string literal"):
        seal_literals(sql)

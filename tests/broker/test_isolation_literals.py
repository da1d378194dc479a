"""Literals stay literals: Spark's variable substitution can neither read the broker's
environment nor move where Spark sees a literal end. Both guards are checked on their own: the
sessions the broker runs queries on substitute nothing, and the text it hands Spark would be
safe on a session that still did."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.spark.executor import SparkExecutor
from horizon_broker.broker.sql.sealing import seal_literals

TRICKY = st.lists(
    st.one_of(
        st.sampled_from(["$", "{", "}", "${", "'", '"', "\\", ":", "env:", "HOME", "\n", "\t"]),
        st.characters(exclude_categories=("Cs",)),
    ),
    max_size=12,
).map("".join)


def _literal(value: str) -> str:
    return exp.Literal.string(value).sql(dialect="spark")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=TRICKY)
def test_any_string_literal_comes_back_through_execute_query_exactly_as_written(client, value):
    answer = client.query(f"SELECT {_literal(value)} AS t", cache=False)
    assert answer.column("t").to_pylist() == [value]


@pytest.mark.parametrize(
    "text",
    ["${env:HOME}", "${system:java.home}", "${spark.app.name}", "a${nope}b", "${env:PATH}"],
)
def test_a_substitution_sequence_in_a_literal_reads_nothing_from_the_broker(client, text):
    answer = client.query(f"SELECT '{text}' AS t", cache=False)
    assert answer.column("t").to_pylist() == [text]
    assert os.environ["HOME"] not in str(answer.column("t").to_pylist())


def test_a_vanishing_sequence_cannot_move_where_a_literal_ends(client):
    # With substitution on, 'x\${nope}' would become 'x\' and the literal would run on into the
    # next one: Spark would parse a query the rewriter never saw.
    answer = client.query("SELECT 'x\\${nope}' AS a, ', 1 AS b --' AS c", cache=False)
    assert answer.column_names == ["a", "c"]
    assert answer.to_pylist() == [{"a": "x${nope}", "c": ", 1 AS b --"}]


def test_a_substitution_sequence_in_a_quoted_name_is_refused(client):
    with pytest.raises(InvalidArgument, match=r"'\$\{' outside a string literal"):
        client.query("SELECT 1 AS `${env:HOME}`", cache=False)


def test_the_broker_turns_substitution_off_in_a_session_it_is_handed(spark):
    handed = spark.newSession()
    handed.conf.set("spark.sql.variable.substitute", "true")
    executor = SparkExecutor(handed)
    for session in (executor.spark, *executor.mirrors):
        assert session.conf.get("spark.sql.variable.substitute") == "false"
        row = session.sql("SELECT '${spark.app.name}' AS t").collect()[0]
        assert row.t == "${spark.app.name}"


def test_sealed_text_keeps_its_literals_even_on_a_session_that_substitutes(spark):
    substituting = spark.newSession()
    substituting.conf.set("spark.sql.variable.substitute", "true")
    raw = "SELECT '${spark.app.name}' AS a, 'x\\${nope}' AS b, 'y' AS c"
    hazard = substituting.sql("SELECT '${spark.app.name}' AS a").collect()[0].a
    assert hazard != "${spark.app.name}"  # the session really substitutes
    row = substituting.sql(seal_literals(raw)).collect()[0]
    assert (row.a, row.b, row.c) == ("${spark.app.name}", "x${nope}", "y")

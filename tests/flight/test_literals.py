"""Literals stay literals through Flight SQL: a statement's own literals and strings bound to its
``?`` parameters come back exactly as written, ``${...}`` included (Spark's variable substitution
would read the broker's environment)."""

from __future__ import annotations

import pytest

VALUES = [
    "${env:HOME}",
    "${system:java.home}",
    "${spark.app.name}",
    "a${nope}b",
    "x\\${nope}",
    'it\'s \\ "${x}" {$}',
    "ünï ${cødé} \n\t",
]


@pytest.mark.parametrize("value", VALUES)
def test_a_string_bound_to_a_parameter_comes_back_exactly_as_written(adbc, value):
    with adbc.cursor() as cursor:
        cursor.execute("SELECT ? AS t", (value,))
        assert cursor.fetch_arrow_table().column("t").to_pylist() == [value]


def test_a_statements_own_substitution_sequence_comes_back_as_written(adbc):
    with adbc.cursor() as cursor:
        cursor.execute("SELECT '${env:HOME}' AS h, '${spark.app.name}' AS n")
        assert cursor.fetch_arrow_table().to_pylist() == [
            {"h": "${env:HOME}", "n": "${spark.app.name}"}
        ]

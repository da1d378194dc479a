"""Literals stay literals through the console's query box: a string literal with ``${...}``,
quotes, backslashes and unicode comes back on the page exactly as written (Spark's variable
substitution would read the broker's environment)."""

from __future__ import annotations

import html
import re

import pytest
from sqlglot import exp

from tests.observe.conftest import ADMIN
from tests.observe.console_http import ConsoleHttp

CELLS = re.compile(r"<td>(.*?)</td>", re.DOTALL)
VALUES = ["${env:HOME}", "${spark.app.name}", "a${nope}b", "x\\${nope}", 'it\'s "${x}" ünï {$}']


@pytest.mark.parametrize("value", VALUES)
def test_a_literal_comes_back_through_the_console_exactly_as_written(watched, value):
    console = ConsoleHttp(watched.broker.console.url)
    literal = exp.Literal.string(value).sql(dialect="spark")
    answer = console.post(
        "/query",
        {"sql": f"SELECT {literal} AS t", "action": "run"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert answer.status == 200, answer.text
    assert [html.unescape(cell) for cell in CELLS.findall(answer.text)] == [value]

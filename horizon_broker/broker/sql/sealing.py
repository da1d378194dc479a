"""Spark SQL text whose literals no Spark can read as anything else.

Spark replaces ``${name}`` in a query's text before it parses it when
``spark.sql.variable.substitute`` is on (its default): environment variables (``${env:HOME}``),
JVM properties and session settings, anywhere in the text, string literals included. The broker
turns substitution off in every session it runs queries on (:mod:`horizon_broker.broker.spark.literals`); the
text it writes is safe even where that failed, because :func:`seal_literals` writes the ``$`` of
every ``${`` inside a string literal as the escape ``\\u0024``, which Spark's parser reads back as
``$`` after substitution would have run, and refuses a ``${`` anywhere else (a quoted name, a
comment).

>>> print(seal_literals("SELECT '${env:HOME}' AS t"))
SELECT '\\u0024{env:HOME}' AS t
>>> seal_literals("SELECT `${x}` FROM t")
Traceback (most recent call last):
...
horizon_broker._core.errors.InvalidArgument: the query has '${' outside a string literal ...
"""

from __future__ import annotations

import re

from sqlglot.dialects.spark import Spark
from sqlglot.tokenizer_core import TokenType

from horizon_broker._core.errors import InvalidArgument

SUBSTITUTION_START = "${"
_STRING_TOKENS = frozenset({TokenType.STRING, TokenType.NATIONAL_STRING})
_DOLLAR_BRACE = re.compile(r"(\\*)\$\{")
_DIALECT = Spark()


def seal_literals(sql: str) -> str:
    """``sql`` with each ``${`` inside a string literal written as ``\\u0024{``; InvalidArgument if
    any ``${`` is left outside one. Free when the text has no ``${`` at all (nearly always)."""
    if SUBSTITUTION_START not in sql:
        return sql
    pieces: list[str] = []
    done = 0
    for token in _DIALECT.tokenize(sql):
        if token.token_type in _STRING_TOKENS:
            pieces.append(sql[done : token.start])
            pieces.append(_DOLLAR_BRACE.sub(_escape_dollar, sql[token.start : token.end + 1]))
            done = token.end + 1
    pieces.append(sql[done:])
    sealed = "".join(pieces)
    if SUBSTITUTION_START in sealed:
        raise InvalidArgument(
            "the query has '${' outside a string literal (in a quoted name or a comment): Spark "
            "would read it as a variable to substitute, so Horizon refuses it; rename or remove it"
        )
    return sealed


def _escape_dollar(match: re.Match[str]) -> str:
    backslashes = match.group(1)
    if len(backslashes) % 2:  # ``\$`` is an escaped ``$``: its escape becomes ``\u0024``
        backslashes = backslashes[:-1]
    return backslashes + "\\u0024{"

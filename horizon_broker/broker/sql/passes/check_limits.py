"""Refuse texts past the configured limits before the parser sees them."""

from __future__ import annotations

from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import Token, TokenType

from horizon_broker.broker.sql.errors import QueryTooLarge, SqlSyntaxError
from horizon_broker.broker.sql.model import RewriteLimits

_OPENERS = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE})
_CLOSERS = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END})
_PREFIX_OPERATORS = frozenset(
    {TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE, TokenType.EXCLAMATION}
)
_DIALECT = Spark()


def check_limits(sql: str, limits: RewriteLimits) -> list[Token]:
    """Check the text's length and nesting depth; return its tokens for the parser.

    The parser recurses once per bracket, CASE block and prefix operator, so nesting is measured
    on the token stream, where it costs one pass over the tokens and cannot itself recurse:

    >>> len(check_limits("SELECT ((1))", RewriteLimits()))
    6
    >>> check_limits("SELECT " + "(" * 500 + "1" + ")" * 500, RewriteLimits())
    Traceback (most recent call last):
    ...
    horizon_broker.broker.sql.errors.QueryTooLarge: query nesting depth 500 exceeds the limit of 100 ...
    """
    if len(sql) > limits.max_sql_length:
        raise QueryTooLarge(
            f"query text is {len(sql)} characters long, over the limit of {limits.max_sql_length}"
        )
    try:
        tokens = _DIALECT.tokenize(sql)
    except TokenError as error:
        raise SqlSyntaxError(f"SQL syntax error: {error}") from None
    depth = 0
    prefix_run = 0
    deepest = 0
    for token in tokens:
        kind = token.token_type
        if kind in _OPENERS:
            depth += 1
            prefix_run = 0
        elif kind in _CLOSERS:
            depth -= 1
            prefix_run = 0
        elif kind in _PREFIX_OPERATORS:
            prefix_run += 1
        else:
            prefix_run = 0
        if depth + prefix_run > deepest:
            deepest = depth + prefix_run
    if deepest > limits.max_nesting:
        raise QueryTooLarge(
            f"query nesting depth {deepest} exceeds the limit of {limits.max_nesting} "
            "(brackets, CASE blocks and prefix operators nested in one another)"
        )
    return tokens

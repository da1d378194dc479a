"""Accept exactly one read-only query; refuse every other statement by name."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.errors import StatementNotAllowed

_QUERY_ROOTS = (exp.Query, exp.Values)


def _statement_name(statement: exp.Expr) -> str:
    """A readable name of the statement, e.g. ``INSERT``, ``ADD JAR``, ``SET``."""
    if isinstance(statement, exp.Command):
        words = [statement.name.upper()]
        argument = statement.expression
        if isinstance(argument, exp.Literal | exp.Var) and argument.name:
            words.append(argument.name.split()[0].upper())
        return " ".join(words)
    text = statement.sql(dialect="spark")
    return " ".join(text.split()[:2]).upper() or type(statement).__name__.upper()


def check_statement_kind(statements: list[exp.Expr | None]) -> exp.Expr:
    """The one query among ``statements`` (the parser's output), or an error naming the offender.

    >>> import sqlglot
    >>> check_statement_kind(sqlglot.parse("SELECT 1;", read="spark")).sql()
    'SELECT 1'
    >>> check_statement_kind(sqlglot.parse("DROP TABLE t", read="spark"))
    Traceback (most recent call last):
    ...
    horizon_broker.broker.sql.errors.StatementNotAllowed: only a single read-only query ... got DROP TABLE
    """
    present = [statement for statement in statements if statement is not None]
    if not present:
        raise StatementNotAllowed("empty request: send one SELECT query")
    if len(present) > 1:
        raise StatementNotAllowed(
            f"only a single query per request is allowed, got {len(present)} statements"
        )
    statement = present[0]
    if not isinstance(statement, _QUERY_ROOTS):
        raise StatementNotAllowed(
            "only a single read-only query (SELECT, WITH, VALUES, set operations) is allowed, "
            f"got {_statement_name(statement)}"
        )
    return statement

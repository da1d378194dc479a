"""Values of constant SQL expressions, computed without Spark (pure).

The work budget (:mod:`horizon_broker.broker.sql.passes.check_budget`) must know how many rows ``range(...)``
makes or how long ``sequence(...)`` is before anything runs, so it folds the constant
expressions those arguments are written with: integer literals and their arithmetic, date and
timestamp literals, and interval literals. Anything else is not a constant here (None), even if
Spark could fold it; the budget then refuses what it cannot bound.
"""

from __future__ import annotations

import datetime as dt
import re

from sqlglot import exp

_INT64 = (-(2**63), 2**63 - 1)
_INTEGER_TYPES = (
    exp.DataType.Type.TINYINT,
    exp.DataType.Type.SMALLINT,
    exp.DataType.Type.INT,
    exp.DataType.Type.BIGINT,
)
_DATE_TYPES = (exp.DataType.Type.DATE,)
_TIMESTAMP_TYPES = (
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPLTZ,
    exp.DataType.Type.TIMESTAMPNTZ,
)
_UNIT_SECONDS = {
    "MICROSECOND": 1e-6,
    "MILLISECOND": 1e-3,
    "SECOND": 1,
    "MINUTE": 60,
    "HOUR": 3600,
    "DAY": 86400,
    "WEEK": 7 * 86400,
    "MONTH": 28 * 86400,  # the shortest month: the count is an upper bound
    "QUARTER": 89 * 86400,
    "YEAR": 365 * 86400,
}
_SUFFIXED_INTEGER = re.compile(r"^(-?[0-9]+)[LSYlsy]?$")


def integer_value(node: exp.Expr | None) -> int | None:
    """The value of a constant integer expression, or None.

    >>> import sqlglot
    >>> integer_value(sqlglot.parse_one("-(2 * 3) + 10 div 4", read="spark"))
    -4
    >>> integer_value(sqlglot.parse_one("1e9", read="spark")) is None
    True
    """
    value = _integer(node)
    if value is None or not _INT64[0] <= value <= _INT64[1]:
        return None
    return value


def _integer(node: exp.Expr | None) -> int | None:
    if node is None:
        return None
    if isinstance(node, exp.Paren):
        return _integer(node.this)
    if isinstance(node, exp.Literal):
        return None if node.is_string else _suffixed_integer(str(node.this))
    if isinstance(node, exp.Neg):
        inner = _integer(node.this)
        return None if inner is None else -inner
    if isinstance(node, (exp.Cast, exp.TryCast)) and node.to.is_type(*_INTEGER_TYPES):
        inner = node.this
        if isinstance(inner, exp.Literal) and inner.is_string:
            return _suffixed_integer(inner.name.strip())
        return _integer(inner)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.IntDiv, exp.Mod)):
        left, right = _integer(node.this), _integer(node.expression)
        if left is None or right is None:
            return None
        return _arithmetic(node, left, right)
    return None


def _suffixed_integer(text: str) -> int | None:
    match = _SUFFIXED_INTEGER.match(text)
    return int(match.group(1)) if match else None


def _arithmetic(node: exp.Expr, left: int, right: int) -> int | None:
    """``left <op> right`` with Spark's integer semantics (division truncates toward zero, the
    remainder takes the dividend's sign); None when dividing by zero."""
    if isinstance(node, exp.Add):
        return left + right
    if isinstance(node, exp.Sub):
        return left - right
    if isinstance(node, exp.Mul):
        return left * right
    if right == 0:
        return None
    quotient = abs(left) // abs(right) * (1 if (left >= 0) == (right >= 0) else -1)
    return quotient if isinstance(node, exp.IntDiv) else left - quotient * right


def instant_seconds(node: exp.Expr | None) -> float | None:
    """Seconds since the epoch of a constant date or timestamp literal (``DATE '...'``,
    ``TIMESTAMP '...'``, ``CAST('...' AS DATE)``, ``to_date('...')``), else None."""
    if isinstance(node, exp.Paren):
        return instant_seconds(node.this)
    text = None
    if isinstance(node, (exp.Cast, exp.TryCast)) and node.to.is_type(
        *_DATE_TYPES, *_TIMESTAMP_TYPES
    ):
        text = node.this.name if isinstance(node.this, exp.Literal) else None
    elif isinstance(node, (exp.TsOrDsToDate, exp.StrToDate, exp.StrToTime)):
        inner = node.this
        text = inner.name if isinstance(inner, exp.Literal) and inner.is_string else None
    if text is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def interval_seconds(node: exp.Expr | None) -> float | None:
    """The length in seconds of a constant interval literal (``INTERVAL 1 DAY``,
    ``INTERVAL '2' HOUR``), months counted as their shortest; None when not one."""
    if not isinstance(node, exp.Interval):
        return None
    unit = node.args.get("unit")
    amount_node = node.this
    if unit is None or amount_node is None:
        return None
    amount = None
    if isinstance(amount_node, exp.Literal):
        try:
            amount = float(amount_node.name)
        except ValueError:
            return None
    else:
        value = integer_value(amount_node)
        amount = None if value is None else float(value)
    name = unit.name.upper().rstrip("S")
    if amount is None or name not in _UNIT_SECONDS:
        return None
    return amount * _UNIT_SECONDS[name]


def integer_literal(node: exp.Expr | None) -> int | None:
    """The value of an integer literal (``5``, ``-5``), else None: snapshot clauses and
    ``table_changes`` bounds take literals, not expressions."""
    negative = False
    if isinstance(node, exp.Neg):
        negative, node = True, node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = int(node.name)
        except ValueError:
            return None
        return -value if negative else value
    return None


def timestamp_literal(node: exp.Expr | None) -> str | None:
    """The text of a timestamp literal: ``'2026-...'`` or ``TIMESTAMP '2026-...'``."""
    if isinstance(node, exp.Cast) and node.to.is_type(
        exp.DataType.Type.TIMESTAMP,
        exp.DataType.Type.TIMESTAMPTZ,
        exp.DataType.Type.TIMESTAMPLTZ,
        exp.DataType.Type.TIMESTAMPNTZ,
        exp.DataType.Type.DATE,
    ):
        node = node.this
    if isinstance(node, exp.Literal) and node.is_string:
        return node.name
    return None

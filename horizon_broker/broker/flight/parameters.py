"""Binding a prepared statement's ``?`` placeholders as SQL literals (pure).

Each ``?`` is replaced, in the order it appears in the text, by a literal sqlglot generates for
the bound value (strings escaped the way Spark reads them, numbers typed as the Arrow value is),
and the bound text then goes through the same rewrite and checks as any query: a value can never
become SQL. Only values that have an exact Spark literal are accepted.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from horizon_broker._core.errors import InvalidArgument

DIALECT = "spark"


def placeholder_spans(sql: str) -> list[tuple[int, int]]:
    """Where each positional ``?`` placeholder is in ``sql`` (start, end inclusive), in order.

    Named markers (``:name``) are refused: Flight SQL binds parameters by position.
    """
    try:
        tokens = sqlglot.tokenize(sql, read=DIALECT)
        trees = sqlglot.parse(sql, read=DIALECT)
    except SqlglotError as error:
        raise InvalidArgument(f"cannot parse the statement: {error}") from None
    spans = [(t.start, t.end) for t in tokens if t.token_type == TokenType.PLACEHOLDER]
    placeholders = [p for tree in trees if tree is not None for p in tree.find_all(exp.Placeholder)]
    named = [str(p.this) for p in placeholders if p.args.get("this")]
    if named:
        raise InvalidArgument(
            f"named parameter markers are not supported (:{', :'.join(named)}): use ? and bind "
            "the values by position"
        )
    if len(placeholders) != len(spans):
        raise InvalidArgument("a ? in this statement is not in a place a value can go")
    return spans


def result_shape(sql: str) -> str:
    """``sql`` with the literals of its filters (WHERE, HAVING, LIMIT, OFFSET) replaced by ``?``:
    statements of one shape answer with one schema (a filter's values never change the result's
    columns or their types), so a lookup prepared with a new key each time is analysed once."""
    try:
        trees = sqlglot.parse(sql, read=DIALECT)
    except SqlglotError:
        return sql
    shapes = []
    for tree in trees:
        if tree is None:
            continue
        for clause in list(tree.find_all(exp.Where, exp.Having, exp.Limit, exp.Offset)):
            for literal_node in list(clause.find_all(exp.Literal)):
                literal_node.replace(exp.Placeholder())
        shapes.append(tree.sql(dialect=DIALECT))
    return ";".join(shapes)


def bind(sql: str, values: Sequence[pa.Scalar]) -> str:
    """``sql`` with its placeholders replaced by ``values`` as literals."""
    spans = placeholder_spans(sql)
    if len(values) != len(spans):
        raise InvalidArgument(
            f"the statement has {len(spans)} parameter marker(s) (?) but {len(values)} "
            "value(s) were bound"
        )
    pieces = []
    previous = 0
    for index, ((start, end), value) in enumerate(zip(spans, values, strict=True), start=1):
        pieces.append(sql[previous:start])
        pieces.append(literal(value, index))
        previous = end + 1
    pieces.append(sql[previous:])
    return "".join(pieces)


def literal(value: pa.Scalar, position: int = 1) -> str:
    """The Spark SQL literal of an Arrow scalar (``position`` names it in errors)."""
    kind = value.type
    python = value.as_py()
    if python is None:
        return "NULL"
    if pa.types.is_dictionary(kind):
        return literal(value.value, position)
    if pa.types.is_boolean(kind):
        return "TRUE" if python else "FALSE"
    text = _number_literal(kind, python)
    if text is None:
        text = _text_or_time_literal(kind, python)
    if text is not None:
        return text
    raise InvalidArgument(
        f"parameter {position} has type {kind}, which has no SQL literal Horizon binds: send "
        "booleans, integers, floating point numbers, decimals, strings, binary, dates or "
        "timestamps"
    )


def _number_literal(kind: pa.DataType, python: Any) -> str | None:
    """An integer, floating point or decimal value's literal; None for other types."""
    if pa.types.is_integer(kind):
        return str(int(python))  # Spark types it INT or BIGINT by size, as LIMIT needs
    if pa.types.is_floating(kind):
        target = "FLOAT" if kind == pa.float32() else "DOUBLE"
        if math.isnan(python):
            return f"CAST('NaN' AS {target})"
        if math.isinf(python):
            return f"CAST('{'-' if python < 0 else ''}Infinity' AS {target})"
        return _cast(repr(float(python)), target)
    if pa.types.is_decimal(kind):
        text = format(decimal.Decimal(python), "f")
        return f"CAST({_string(text)} AS DECIMAL({kind.precision}, {kind.scale}))"
    return None


def _text_or_time_literal(kind: pa.DataType, python: Any) -> str | None:
    """A string, binary, date or timestamp value's literal; None for other types."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return _string(python)
    if (
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
    ):
        return f"X'{bytes(python).hex().upper()}'"
    if pa.types.is_date(kind):
        return f"DATE {_string(python.isoformat())}"
    if pa.types.is_timestamp(kind) and isinstance(python, dt.datetime):
        if kind.tz is not None:
            instant = python.astimezone(dt.UTC).replace(tzinfo=None)
            return f"CAST({_string(instant.isoformat(sep=' ') + '+00:00')} AS TIMESTAMP)"
        return f"CAST({_string(python.isoformat(sep=' '))} AS TIMESTAMP_NTZ)"
    return None


def _cast(text: str, spark_type: str) -> str:
    return f"CAST({text} AS {spark_type})"


def _string(text: str) -> str:
    return exp.Literal.string(text).sql(dialect=DIALECT)


def parameter_row(table: pa.Table) -> list[pa.Scalar]:
    """The one row of values bound to a prepared query (Flight SQL sends them as a batch)."""
    if table.num_rows != 1:
        raise InvalidArgument(
            f"a prepared query takes exactly one row of parameters, {table.num_rows} were bound"
        )
    return [column[0] for column in table.columns]


def parameter_schema(count: int) -> pa.Schema:
    """The schema of a statement's parameters: one field per ``?``, in order. Their types are
    not inferred (``null``: any of the types :func:`literal` accepts)."""
    return pa.schema([pa.field(f"parameter_{i}", pa.null()) for i in range(1, count + 1)])


def read_parameters(reader: fl.MetadataRecordBatchReader) -> pa.Table:
    """The parameter batches a client sends with DoPut; more than a row is refused early."""
    batches = []
    rows = 0
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        if chunk.data is None:
            continue
        batches.append(chunk.data)
        rows += chunk.data.num_rows
        if rows > 1:
            break
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches)

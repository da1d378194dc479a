"""The reference answers of the TPC-H queries (DuckDB over the final state) and the comparison
every answer of Horizon and of plain Spark must pass before its timing counts.

Engines differ in number types (Spark's ``decimal(38,6)`` sum against DuckDB's double average),
so values compare as numbers with a tolerance; rows compare as sorted lists, which also accepts
two engines ordering tied rows differently.
"""

from __future__ import annotations

import datetime
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa

Row = tuple[Any, ...]


class WrongAnswer(AssertionError):
    """An engine's answer to a query is not DuckDB's."""


def reference_answers(tables: dict[str, pa.Table], queries: dict[int, str]) -> dict[int, list[Row]]:
    """Each query's answer from DuckDB over ``tables``."""
    import duckdb

    connection = duckdb.connect()
    try:
        for name, table in tables.items():
            connection.register(name, table)
        return {number: connection.execute(sql).fetchall() for number, sql in queries.items()}
    finally:
        connection.close()


def rows_of(table: pa.Table) -> list[Row]:
    """An Arrow answer as tuples, in its order."""
    columns = [column.to_pylist() for column in table.columns]
    return list(zip(*columns, strict=True)) if columns else []


def _value(value: Any) -> Any:
    if isinstance(value, Decimal | float | int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, datetime.datetime):
        return value.date()
    return value


def _sort_key(row: Row) -> tuple[str, ...]:
    # Rounded, so two engines' last digits do not reorder rows.
    return tuple(
        f"{value:.1f}" if isinstance(value, float) else repr(value) for value in map(_value, row)
    )


def same_value(ours: Any, theirs: Any) -> bool:
    ours, theirs = _value(ours), _value(theirs)
    if isinstance(ours, float) and isinstance(theirs, float):
        return math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-4)
    return bool(ours == theirs)


def check(number: int, engine: str, answer: list[Row], expected: list[Row]) -> None:
    """Raise :class:`WrongAnswer` naming the first difference unless ``answer`` is
    ``expected``."""
    if len(answer) != len(expected):
        raise WrongAnswer(
            f"Q{number:02d} from {engine}: {len(answer)} rows, DuckDB {len(expected)}"
        )
    for ours, theirs in zip(
        sorted(answer, key=_sort_key), sorted(expected, key=_sort_key), strict=True
    ):
        if len(ours) != len(theirs) or not all(
            same_value(a, b) for a, b in zip(ours, theirs, strict=True)
        ):
            raise WrongAnswer(f"Q{number:02d} from {engine}: row {ours}, DuckDB {theirs}")

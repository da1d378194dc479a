"""Helpers of the Spark-backed rewriter tests: histories, the visibility model, views."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import strategies as st

INTERNAL_COLUMN = "_segment_row"  # segment files may carry columns users must not see


def visible(rows: Iterable[tuple], snapshot: int) -> list[tuple]:
    """The reference model: rows whose half-open life [validFrom, validUntil) holds ``snapshot``
    (validity columns are the last two of each row)."""
    return [row for row in rows if row[-2] <= snapshot and (row[-1] is None or row[-1] > snapshot)]


@st.composite
def version_chains(draw: st.DrawFn, key_count: int = 4, horizon: int = 30) -> list[tuple]:
    """Per key: a chain of versions (each validUntil the next validFrom), ending open or in a
    delete, plus out-of-order losers with an empty interval. Rows are (key, value, from, until)."""
    rows: list[tuple] = []
    for key in range(key_count):
        count = draw(st.integers(0, 3))
        times = sorted(
            draw(st.lists(st.integers(1, horizon), min_size=count, max_size=count, unique=True))
        )
        deleted = draw(st.booleans())
        for index, start in enumerate(times):
            if index + 1 < count:
                until: int | None = times[index + 1]
            elif deleted:
                until = draw(st.integers(start + 1, horizon + 5))
            else:
                until = None
            rows.append((key, draw(st.one_of(st.none(), st.integers(-3, 3))), start, until))
        for moment in draw(st.lists(st.integers(1, horizon + 5), max_size=2)):
            rows.append((key, draw(st.integers(-3, 3)), moment, moment))
    return rows


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(int(value))


def _split_top_level(schema: str) -> list[str]:
    """``schema`` split at the commas outside brackets (``decimal(18,2)``, ``map<a,b>``)."""
    parts, depth, current = [], 0, []
    for char in schema:
        if char in "(<":
            depth += 1
        elif char in ")>":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def register(spark: Any, name: str, schema: str, rows: Sequence[tuple]) -> None:
    """A temp view of ``rows`` built in SQL (much cheaper than a DataFrame from Python rows)."""
    columns = [part.strip().split(" ", 1) for part in _split_top_level(schema)]
    names = ", ".join(column for column, _ in columns)
    casts = ", ".join(f"CAST({column} AS {kind}) AS {column}" for column, kind in columns)
    if rows:
        values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
        body = f"SELECT {casts} FROM VALUES {values} AS v({names})"
    else:
        nulls = ", ".join(f"CAST(NULL AS {kind}) AS {column}" for column, kind in columns)
        body = f"SELECT {nulls} WHERE false"
    spark.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS {body}")


def register_source(spark: Any, view: str, user_schema: str, rows: Sequence[tuple]) -> None:
    """A source view like the broker's: an internal column first, then the user columns and the
    validity columns."""
    schema = f"{INTERNAL_COLUMN} string, {user_schema}, validFrom bigint, validUntil bigint"
    register(spark, view, schema, [("internal", *row) for row in rows])


def bag(spark: Any, sql: str) -> Counter:
    return Counter(tuple(row) for row in spark.sql(sql).collect())


def bags_of_many(spark: Any, queries: Sequence[str]) -> list[Counter]:
    """The result bag of each query, computed in ONE Spark job (each query's rows tagged with its
    index and serialised to JSON), because a job per query is what makes these tests slow."""
    union = " UNION ALL ".join(
        f"SELECT {index} AS q, to_json(struct(*)) AS r FROM ({query})"
        for index, query in enumerate(queries)
    )
    bags: list[Counter] = [Counter() for _ in queries]
    for row in spark.sql(union).collect():
        bags[row[0]][row[1]] += 1
    return bags

"""TPC-H answers at an earlier snapshot: ``VERSION AS OF`` and ``TIMESTAMP AS OF`` through the
broker, each checked against DuckDB over the tables as the first batches left them.

``bench.tpch`` ingests round by round (every table's first batch, then every table's second,
then third), so the snapshot of the first round's last commit holds exactly the first batches:
wrong values not yet corrected, ghost rows not yet deleted, late rows not yet there. Reading it
goes through the closed files and the full visibility predicate that the latest snapshot skips,
so it checks the other half of the rewrite's views.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from bench.tpch_answers import check, reference_answers, rows_of
from bench.tpch_data import DELETED, KEYS, SEQUENCE
from bench.tpch_queries import QUERIES


def as_of(sql: str, kind: str, value: int | str) -> str:
    """``sql`` with ``<kind> AS OF <value>`` on every TPC-H table it reads (not on its CTEs)."""
    tree = sqlglot.parse_one(sql, read="spark")
    ctes = {cte.alias for cte in tree.find_all(exp.CTE)}
    literal = exp.Literal.string(value) if isinstance(value, str) else exp.Literal.number(value)
    for table in tree.find_all(exp.Table):
        if table.name in KEYS and table.name not in ctes:
            table.set("version", exp.Version(this=kind, kind="AS OF", expression=literal))
    return tree.sql(dialect="spark")


def first_round_state(first_batches: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The tables after their first batch alone (no key twice in it, no delete)."""
    return {name: batch.drop_columns([SEQUENCE, DELETED]) for name, batch in first_batches.items()}


def check_time_travel(
    client: Any, numbers: list[int], first_batches: dict[str, pa.Table], snapshot: int,
    between: Callable[[], None] = lambda: None,
) -> dict[str, int]:  # fmt: skip
    """Every chosen query at ``snapshot`` by version and by its millisecond's timestamp, each
    answer checked against DuckDB on the first round's tables; the rows each returned.
    ``between`` runs before each query (the lock's bounded holds)."""
    from horizon_broker._core.hlc import format_snapshot

    expected = reference_answers(
        first_round_state(first_batches), {number: QUERIES[number] for number in numbers}
    )
    moment = format_snapshot(snapshot).split("Z+", 1)[0]
    answered = {}
    for number in numbers:
        between()
        for kind, value in (("VERSION", snapshot), ("TIMESTAMP", moment)):
            answer = client.execute(as_of(QUERIES[number], kind, value), cache=False)
            check(number, f"Horizon {kind} AS OF {value}", rows_of(answer.table), expected[number])
        answered[f"Q{number:02d}"] = answer.table.num_rows
    return answered

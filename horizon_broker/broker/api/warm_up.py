"""A started broker runs one small query per table before its callers' first ones.

A new Spark session pays once for its cold paths: the first views over a table's files, the first
jobs, their generated code, the JVM's first compilations. Paid by callers, that is their first
queries: in the fault harness's 30-minute run a broker idle since its restart three minutes
earlier took over 30 s for the four queries that failed over to it when the other broker was
killed (views 12 s, rewrite 5 s, Spark 7 s for the first queries of such a broker, with two
other JVMs starting on the same two cores), and all four missed their deadline. So once queries
answer, a background thread reads one row of every table as the broker itself (the result cache
bypassed); a failure is only logged: the table's own first query reports its error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlglot import exp

from horizon_broker.broker.engine.read_options import ReadOptions
from horizon_broker.broker.grants import ALL_TABLES, Principal
from horizon_broker.broker.spark.executor import QueryScope

log = logging.getLogger(__name__)

WARM_UP_PRINCIPAL = Principal("horizon-warm-up", frozenset({ALL_TABLES}), inspect=False)
_UNCACHED = ReadOptions(use_cache=False)


def warm_up_sql(table: str) -> str:
    """The warm-up query of ``table``: its views built and one Spark job that reads a row.

    >>> warm_up_sql("bank"), warm_up_sql("odd`name")
    ('SELECT * FROM `bank` LIMIT 1', 'SELECT * FROM `odd``name` LIMIT 1')
    """
    return f"SELECT * FROM {exp.to_identifier(table, quoted=True).sql(dialect='spark')} LIMIT 1"


def warm_up(
    engine: Any, tables: Sequence[str], stopped: Callable[[], bool] = lambda: False
) -> list[str]:
    """Run :func:`warm_up_sql` of each of ``tables`` on ``engine`` until ``stopped()``; returns
    the tables warmed."""
    warmed = []
    for table in tables:
        if stopped():
            break
        started = time.perf_counter()
        deadline = time.monotonic() + engine.config.limits.query_timeout_s
        scope = QueryScope(f"warm-up-{table}", deadline=deadline)
        try:
            execution = engine.execute(
                warm_up_sql(table), WARM_UP_PRINCIPAL, scope, max_rows=1, options=_UNCACHED
            )
            try:
                for _ in execution.batches():
                    pass
            finally:
                execution.close()
        except Exception as error:  # best effort: the table's own first query reports it
            log.info("warm-up of table %s failed: %s", table, error)
            continue
        warmed.append(table)
        log.info("warm-up of table %s took %.2f s", table, time.perf_counter() - started)
    return warmed


def start_warm_up(
    engine: Any, tables: Sequence[str], stopped: Callable[[], bool]
) -> threading.Thread:
    """:func:`warm_up` on a daemon thread of its own (started)."""
    thread = threading.Thread(
        target=warm_up, args=(engine, list(tables), stopped), name="horizon-warm-up", daemon=True
    )
    thread.start()
    return thread

"""An idle broker keeps its views of every table at the table's newest state.

A query builds the views of a table at a state the broker has no views of yet (the timeline
moved: new segments, an updater's rewrite, a compaction): Spark lists and resolves the new file
sets, seconds on a loaded machine. A broker that answers no queries (the other one of a pair)
would build them for every table at once when the clients of a failed broker move to it, on
their first queries. So while no query runs, every ``interval_s`` the keeper builds the views of
each table at its newest state, as a query would lease them, and lets them go (the cache keeps
the newest views of a table and drops older ones no query holds). Busy, it does nothing: the
queries keep the views current themselves.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from horizon_broker._core.errors import HorizonError

log = logging.getLogger(__name__)


def refresh_views(
    engine: Any,
    tables: Sequence[str],
    stopped: Callable[[], bool] = lambda: False,
    failed: dict[str, int] | None = None,
) -> list[str]:
    """Build the views of each of ``tables`` at its newest state where ``engine`` has none;
    returns the tables whose views were built. Stops between tables when a query starts.
    ``failed`` (table -> generation) records a state whose views could not be built (a file
    gone), which is not tried again until the table's timeline moves."""
    built = []
    failed = {} if failed is None else failed
    for table in tables:
        if stopped() or engine.queries.running():
            break
        try:
            state = engine.follower.view(table)
        except HorizonError:  # no state to build from: the table's next query says why
            continue
        if failed.get(table) == int(state.generation):
            continue
        failed.pop(table, None)
        views = engine.views
        before = views.builds
        started = time.perf_counter()
        try:
            with views.lease([state]):
                pass
        except Exception as error:  # best effort: a query building them reports the error
            log.info("keeping the views of table %s failed: %s", table, error)
            failed[table] = int(state.generation)
            continue
        if views.builds > before:
            built.append(table)
            log.info(
                "views of table %s kept at generation %s (%.2f s)",
                table, state.generation, time.perf_counter() - started,
            )  # fmt: skip
    return built


def start_view_keeper(engine: Any, interval_s: float, stopped: threading.Event) -> threading.Thread:
    """:func:`refresh_views` of every table every ``interval_s`` while no query runs, on a
    daemon thread of its own (started) that ends once ``stopped`` is set."""

    failed: dict[str, int] = {}

    def keep() -> None:
        while not stopped.wait(interval_s):
            supervisor = engine.supervisor
            if supervisor is not None and not supervisor.up:
                continue  # a pass stops at once while a query runs (refresh_views)
            try:
                refresh_views(engine, engine.follower.tables(), stopped.is_set, failed)
            except Exception:  # the keeper must outlive any one pass
                log.exception("keeping the views failed")

    thread = threading.Thread(target=keep, name="horizon-view-keeper", daemon=True)
    thread.start()
    return thread

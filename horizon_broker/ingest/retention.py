"""History retention: which superseded versions the updater may drop when it rewrites a segment.

Brokers refuse time travel below a table's retention horizon, the highest horizon any of its
servers reported (see ``horizon_broker.watermark.state``). A version with ``validUntil <= H`` is visible only at
snapshots below ``H``, so once ``H`` is reported (before the rewrite is announced: brokers see the
two events in that order) no allowed query can see it, and the updater drops it.

The horizon trails the table's low-watermark *as computed in Redis* by the retention period; never
the job's own clock, which may run ahead of what brokers serve.
"""

from __future__ import annotations

from typing import Any

from horizon_broker._core.hlc import LOGICAL_BITS
from horizon_broker.watermark.server import ServerClient


def retention_horizon(table_lwm: int | None, retention_ms: int | None, previous: int) -> int:
    """The horizon to enforce now (pure): ``retention_ms`` of HLC time below the table LWM, never
    below ``previous`` (a horizon only moves up), 0 while there is no LWM or no retention."""
    if table_lwm is None or retention_ms is None:
        return previous
    return max(previous, table_lwm - (retention_ms << LOGICAL_BITS), 0)


def kept_rows(horizon: int) -> Any:
    """A Spark predicate: the rows some snapshot at or above ``horizon`` can still see."""
    from pyspark.sql import functions as F

    from horizon_broker.watermark.catalog import VALID_UNTIL

    return F.col(VALID_UNTIL).isNull() | (F.col(VALID_UNTIL) > F.lit(horizon))


def table_lwm(client: ServerClient, table: str) -> int | None:
    """The table's LWM computed in Redis (one round trip), None while a partition is pending."""
    found = client.table_lwm(table)
    return None if found is None else found.lwm

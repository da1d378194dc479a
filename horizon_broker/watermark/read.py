"""Reading one table's low-watermark straight from Redis, in one round trip.

Servers keep a per-table sorted set whose first member is the minimum LWM of the active partitions,
and one of the quiet (idle or parked) partitions, raised to their clocks as they are scanned (see
:mod:`horizon_broker._core.keys`, :mod:`horizon_broker.watermark.partition_lua`), so with active partitions the read costs
O(log partitions) inside Redis however many servers the table has. This is the computed value; a
broker serves its monotonic version.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.commands.core import Script

from horizon_broker._core.keys import DEFAULT_PREFIX
from horizon_broker.watermark import scripts
from horizon_broker.watermark.lwm import ACTIVE, Laggard

_script: Script | None = None


@dataclass(frozen=True, slots=True)
class TableLwm:
    """A table's computed LWM in Redis, who holds it back and how many partitions count.

    ``lwm`` is None while an owned partition has not reported (the laggard is that partition)."""

    lwm: int | None
    laggard: Laggard
    partitions: int


def read_table_lwm(
    client: redis.Redis, table: str, *, prefix: str = DEFAULT_PREFIX
) -> TableLwm | None:
    """One EVALSHA: the table's LWM, or None when no owned partition has reported."""
    global _script
    if _script is None:
        _script = client.register_script(scripts.READ_TABLE_LWM)
    reply = _script(args=[prefix, table], client=client)
    if not reply:
        return None
    lwm_text, partition, owner, count, state = (
        item.decode() if isinstance(item, bytes) else item for item in reply
    )
    lwm = None if lwm_text == "PENDING" else int(lwm_text)
    return TableLwm(lwm, Laggard(str(owner), int(partition), lwm, state or ACTIVE), int(count))

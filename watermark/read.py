"""Reading one table's low-watermark straight from Redis, in one round trip.

Servers keep a per-table sorted set whose first member is the minimum partition LWM (see
:mod:`watermark.keys`), so the read costs O(log partitions) inside Redis however many servers and
partitions the table has. This is the computed value; a broker serves its monotonic version.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.commands.core import Script

from watermark import scripts
from watermark.keys import DEFAULT_PREFIX
from watermark.lwm import Laggard

_script: Script | None = None


@dataclass(frozen=True, slots=True)
class TableLwm:
    """A table's computed LWM in Redis, who holds it back and how many partitions count."""

    lwm: int
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
    lwm, partition, owner, count = reply
    owner_text = owner.decode() if isinstance(owner, bytes) else str(owner)
    return TableLwm(int(lwm), Laggard(owner_text, int(partition), int(lwm)), int(count))

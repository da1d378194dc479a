"""The partition entry in Lua: its fields, its effective LWM, resuming it (rule 7 of
``docs/design/contract/watermarks.md``).

Every script that changes a ``{p}:t:{table}:prog`` entry uses these, so an entry, its member of
the table's ``lwm`` or ``quiet`` sorted set and the pending set always agree. They mirror the pure
rules of :mod:`horizon_broker.watermark.partition_states` (a property test runs both on the same steps).

HLCs exceed a double's precision, so they stay decimal strings: compared zero-padded, and the
highest HLC of a millisecond is computed in two exact halves (:data:`PARTITION_LUA`'s
``last_hlc_of_ms``).

``NOW`` is the state store's clock: Redis time, but never below the time of the last event
(``{p}:clock``), so a partition resumed after a broker saw an event is resumed at or above that
event's time even if Redis's clock stepped back.

The Lua is in ``lua/store_clock.lua``, ``lua/partition.lua`` and ``lua/table_lwm.lua``.
"""

from __future__ import annotations

from horizon_broker._core.lua import lua_file

STORE_CLOCK_LUA = lua_file(__package__, "store_clock")
"""``store_now()``: the state store's clock in ms, as a decimal string (needs LUA_KEYS)."""

PARTITION_LUA = lua_file(__package__, "partition")
"""Entry helpers (need LUA_KEYS and STORE_CLOCK_LUA)."""

TABLE_LWM_LUA = lua_file(__package__, "table_lwm")
"""``table_lwm(t, now)`` (needs the entry helpers); values are zero-padded HLC strings."""

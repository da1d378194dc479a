"""The lock rules of :mod:`horizon_broker.locks.rules` as atomic Lua scripts over one hash per table.

``{p}:t:{table}:locks`` maps a lock id to ``acquired_ms|expires_ms|revoked_by|revoked_ms|request``
(the request as JSON, see :func:`horizon_broker.locks.client.request_json`). Times are Redis's clock
(``TIME``), so every job and broker agrees on which leases have run out. An entry stays until its
lease has run out, also when revoked, so its holder learns why it lost the lock.

:data:`LOCK_LUA` is shared with the announce script (:mod:`horizon_broker.watermark.scripts`), which checks in
the same atomic step that the publisher still holds the locks covering what it publishes. Each
script's Lua is in ``lua/<name>.lua``.
"""

from __future__ import annotations

from horizon_broker._core.keys import LUA_KEYS
from horizon_broker._core.lua import lua_file

LOCK_LUA = lua_file(__package__, "lock")
"""The lock rules as Lua functions (``lock_parse``, ``lock_conflicts``, ``lock_covers``...)."""

_PREAMBLE = LUA_KEYS + LOCK_LUA

ACQUIRE = _PREAMBLE + lua_file(__package__, "acquire")
RENEW = _PREAMBLE + lua_file(__package__, "renew")
RELEASE = _PREAMBLE + lua_file(__package__, "release")
LIST = _PREAMBLE + lua_file(__package__, "list")

PUBLISH_GUARD = lua_file(__package__, "publish_guard")
"""Lua for the announce script (needs :data:`LOCK_LUA` and ``SERVER`` defined before it)."""

"""The Lua scripts that make every server call one atomic step in Redis.

Each script checks the caller's epoch (``ARGV[2]``), changes the state and appends its event to the
log stream in the same step, so the log order is the order in which calls took effect. Replies are
arrays: ``{'OK', ...}``, ``{'EPOCH', current}`` (the data set changed: re-publish first) or
``{'ERR', code, message}``. HLCs stay strings (they do not fit a Lua double). Every event carries
the state store's clock (``NOW``, see :mod:`horizon_broker.watermark.partition_lua`); events that change
partitions carry their resulting progress, so a follower never recomputes what a script decided.

Each script's Lua is in ``lua/<name>.lua`` (what every call script starts with: ``lua/common.lua``).
"""

from __future__ import annotations

from horizon_broker._core.keys import LUA_KEYS
from horizon_broker._core.lua import lua_constants, lua_file
from horizon_broker.locks.scripts import LOCK_LUA, PUBLISH_GUARD
from horizon_broker.watermark.partition_lua import PARTITION_LUA, STORE_CLOCK_LUA, TABLE_LWM_LUA

LOG_MAXLEN = 100_000
"""Approximate length the log stream is trimmed to; a follower further behind does a full sync."""

_COMMON = (
    LUA_KEYS
    + STORE_CLOCK_LUA
    + PARTITION_LUA
    + lua_constants(LOG_MAXLEN=LOG_MAXLEN)
    + lua_file(__package__, "common")
)
"""What every call script starts with: the epoch check, ``SERVER``, ``NOW`` and ``emit``."""


def _script(name: str, *pieces: str) -> str:
    """A call script: the common part, shared ``pieces``, then ``lua/<name>.lua``."""
    return _COMMON + "".join(pieces) + lua_file(__package__, name)


ADOPT_EPOCH = LUA_KEYS + lua_file(__package__, "adopt_epoch")
"""Create the epoch if the data set has none (ARGV[2] is a fresh candidate) and return it."""

REGISTER = _script("register")
HEARTBEAT = _script("heartbeat")
REGISTER_TABLE = _script("register_table")
SEGMENTS = _script("segments", LOCK_LUA, PUBLISH_GUARD)
REPORT = _script("report")
PARK = _script("park")
RETENTION = _script("retention")
ALLOCATE = _script("allocate")
RESERVE = _script("reserve")
CLAIM = _script("claim")
HAND_OVER = _script("hand_over")
DECOMMISSION = _script("decommission")
ALTER_TABLE = _script("alter_table", TABLE_LWM_LUA)
"""Replace a table's descriptor by its next schema version (compare-and-set, above its LWM)."""

SNAPSHOT = LUA_KEYS + STORE_CLOCK_LUA + lua_file(__package__, "snapshot")
CLOCK = LUA_KEYS + STORE_CLOCK_LUA + lua_file(__package__, "clock")
READ_TABLE_LWM = (
    LUA_KEYS
    + STORE_CLOCK_LUA
    + PARTITION_LUA
    + TABLE_LWM_LUA
    + lua_file(__package__, "read_table_lwm")
)

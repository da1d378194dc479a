"""The Redis key layout of Horizon's server state, in one place (Python and the Lua scripts).

It sits at the bottom floor because every client of the state store shares it: the ingestion
servers and the broker's follower (:mod:`watermark`), the lock service (:mod:`locks`) and the pin
store (:mod:`pins`). How values are encoded in the hashes is :mod:`horizon_broker.watermark.records`.

Everything lives under one prefix (default ``horizon``):

=============================  =====================================================================
``{p}:epoch``                  random id of this Redis's data set; a new one means the data was lost
``{p}:seq``                    last event sequence number (stream ids are ``<seq>-0``)
``{p}:log``                    stream of every change, one entry per atomic call, trimmed ~MAXLEN
``{p}:tables``                 hash table -> descriptor JSON
``{p}:servers``                hash server -> ``live`` | ``decommissioned``
``{p}:hb``                     hash server -> last heartbeat (Redis time, ms)
``{p}:hbclock``                hash server -> the server's clock (HLC) at its last heartbeat: the
                               LWM of its idle partitions
``{p}:publishedon``            hash server -> run id of the primary it last registered on (rule F4:
                               no partition number is handed out until every live server has)
``{p}:clock``                  the state store's clock: the time (ms) of the last event, so the
                               store's time as scripts see it never goes back
``{p}:floor``                  hash table -> the highest snapshot a broker served (read-only here)
``{p}:last``                   ``t|s`` of the last event (its store time and server): each event
                               carries its predecessor's, so a follower notices a log that went
                               back under it (docs/design/contract/failover.md, F5)
``{p}:t:{table}:segs``         hash segment key -> segment JSON (every announced segment)
``{p}:t:{table}:prog``         hash partition -> ``owner|ingested|applied|reported_ms|member|state|
                               since_ms|floor`` (``""`` = none; state ``""`` active, ``idle`` or
                               ``parked``; floor: where it was last resumed)
``{p}:t:{table}:lwm``          zset (all scores 0) of ``{min:020d}:{partition:05d}`` for owned,
                               reported, active partitions: its first member is their minimum
``{p}:t:{table}:quiet``        the same for idle and parked partitions (their LWM follows a clock)
``{p}:t:{table}:pending``      set of owned partitions that have not reported: while not empty the
                               table has no computed LWM
``{p}:t:{table}:ret``          hash server -> retention horizon HLC
``{p}:t:{table}:alloc``        hash ``{start}|{end}|{version}|{first|overwrite}`` -> next partition
``{p}:t:{table}:majors``       hash ``[start,end]`` -> the highest major version announced for that
                               time chunk (appends and rewrites below it are refused)
``{p}:t:{table}:locks``        hash lock id -> ``acquired|expires|revoked_by|revoked_at|request``
                               (see :mod:`horizon_broker.locks.scripts`)
``{p}:t:{table}:pins``         hash pin id -> ``snapshot|created|expires|owner`` (see :mod:`pins`)
``{p}:t:{table}:pinexp``       zset pin id scored by its expiry (ms): the table's pins, soonest
                               to expire first, so a new pin drops a few expired ones
``{p}:pins``                   hash pin id -> ``{"t": tables, "o": owner}``
``{p}:pinowner:{owner}``       zset pin id scored by its expiry (ms): one identity's pins, for
                               its quotas
=============================  =====================================================================

HLCs exceed a double's 53-bit mantissa, so they are never numbers inside Redis: they are decimal
strings, zero-padded where they must sort.
"""

from __future__ import annotations

import json
import re

from horizon_broker._core.errors import InvalidArgument
from horizon_broker._core.lua import lua_file

DEFAULT_PREFIX = "horizon"
HLC_WIDTH = 20
PARTITION_WIDTH = 5
_SERVER_ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")


def check_server_id(server_id: str) -> str:
    if not isinstance(server_id, str) or not _SERVER_ID.match(server_id):
        raise InvalidArgument(
            f"invalid server id {server_id!r}: 1-200 of letters, digits and _ . : @ -"
        )
    return server_id


def check_prefix(prefix: str) -> str:
    if not _PREFIX.match(prefix):
        raise InvalidArgument(f"invalid key prefix {prefix!r}: letters, digits and _ . : -")
    return prefix


def padded_hlc(hlc: int) -> str:
    """An HLC as a fixed-width decimal string, so string order is numeric order."""
    if not isinstance(hlc, int) or isinstance(hlc, bool) or not 0 <= hlc < 10**HLC_WIDTH:
        raise InvalidArgument(f"commit timestamp {hlc!r} is not a non-negative 64-bit integer")
    return f"{hlc:0{HLC_WIDTH}d}"


def lwm_member(lwm: int, partition: int) -> str:
    return f"{padded_hlc(lwm)}:{partition:0{PARTITION_WIDTH}d}"


def interval_key(start_ms: int, end_ms: int) -> str:
    """The field of a time chunk in its table's ``majors`` hash."""
    return json.dumps([start_ms, end_ms], separators=(",", ":"))


def chunk_key(start_ms: int, end_ms: int, version: str, kind: str) -> str:
    return json.dumps([start_ms, end_ms, version, kind], separators=(",", ":"))


class Keys:
    """Key names for one prefix."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = check_prefix(prefix)
        self.epoch = f"{prefix}:epoch"
        self.seq = f"{prefix}:seq"
        self.log = f"{prefix}:log"
        self.tables = f"{prefix}:tables"
        self.servers = f"{prefix}:servers"
        self.heartbeats = f"{prefix}:hb"
        self.heartbeat_clocks = f"{prefix}:hbclock"
        self.published_on = f"{prefix}:publishedon"
        self.clock = f"{prefix}:clock"
        self.floor = f"{prefix}:floor"

    def _table(self, table: str, what: str) -> str:
        return f"{self.prefix}:t:{table}:{what}"

    def segments(self, table: str) -> str:
        return self._table(table, "segs")

    def progress(self, table: str) -> str:
        return self._table(table, "prog")

    def lwm(self, table: str) -> str:
        return self._table(table, "lwm")

    def quiet(self, table: str) -> str:
        return self._table(table, "quiet")

    def pending(self, table: str) -> str:
        return self._table(table, "pending")

    def retention(self, table: str) -> str:
        return self._table(table, "ret")

    def allocations(self, table: str) -> str:
        return self._table(table, "alloc")

    def locks(self, table: str) -> str:
        return self._table(table, "locks")

    def majors(self, table: str) -> str:
        return self._table(table, "majors")

    def pins(self, table: str) -> str:
        return self._table(table, "pins")

    def pin_expiries(self, table: str) -> str:
        return self._table(table, "pinexp")

    def owner_pins(self, owner: str) -> str:
        """One identity's pins by expiry (the owner is the key's tail, so names cannot clash)."""
        return f"{self.prefix}:pinowner:{owner}"

    @property
    def pin_index(self) -> str:
        """Every live pin's tables, by pin id (see :mod:`horizon_broker.pins.store`)."""
        return f"{self.prefix}:pins"


LUA_KEYS = lua_file(__package__, "keys")
"""Lua preamble (``lua/keys.lua``) defining the same keys from ``ARGV[1]`` (the prefix); see
:class:`Keys`."""

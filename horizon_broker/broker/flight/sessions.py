"""Horizon's read controls in Flight SQL terms: call headers and session options.

A call may carry the read controls as headers (``x-horizon-min-snapshot`` and the others below),
or a client may set them once as Flight SQL session options (``SetSessionOptions``; the session is
the ``arrow_flight_session_id`` cookie the answer sets). A header overrides the session's option
for its call. The values are checked and converted by :meth:`ReadOptions.parse`, as the main API's.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.errors import HorizonError, InvalidArgument, NotFound
from horizon_broker.broker._proto.arrow.flight.protocol import flight_actions_pb2 as fa
from horizon_broker.broker.engine.read_options import ReadOptions
from horizon_broker.broker.flight.quotas import OwnerCounts, Quota, session_quota
from horizon_broker.pins.store import check_pin_id
from horizon_broker.watermark import tokens

SESSION_COOKIE = "arrow_flight_session_id"

MIN_SNAPSHOT = "min_snapshot"
MAX_STALENESS = "max_staleness"
PIN_ID = "pin_id"
BYPASS_CACHE = "bypass_cache"
CATALOG = "catalog"
SCHEMA = "schema"

HEADERS = {
    MIN_SNAPSHOT: "x-horizon-min-snapshot",
    MAX_STALENESS: "x-horizon-max-staleness",
    PIN_ID: "x-horizon-pin-id",
    BYPASS_CACHE: "x-horizon-bypass-cache",
}
"""The call header of each read control (the option name with ``x-horizon-`` and dashes)."""

QUERY_ID_HEADER = "x-horizon-query-id"
"""Names the query (its Spark job group is ``horizon-<id>``, as ExecuteQuery's ``query_id``)."""
_QUERY_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")

DB_SCHEMA = "horizon"
"""The one database schema Horizon's tables are listed under (``horizon.accounts`` resolves)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

Error = fa.SetSessionOptionsResult.ErrorValue


def parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidArgument(f"{name} must be true or false, got {value!r}")


def parse_seconds(name: str, value: Any) -> float:
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if math.isnan(seconds):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r}")
    return seconds


def checked_option(name: str, value: Any) -> Any:
    """The option's value as stored (raises InvalidArgument for a bad one, NotFound for an
    unknown name)."""
    if name == MIN_SNAPSHOT:
        text = str(value)
        tokens.decode(text)
        return text
    if name == MAX_STALENESS:
        seconds = parse_seconds(name, value)
        ReadOptions.parse(max_staleness_s=seconds)
        return seconds
    if name == PIN_ID:
        text = str(value)
        if text:
            check_pin_id(text)
        return text
    if name == BYPASS_CACHE:
        return parse_bool(name, value)
    if name == CATALOG:
        if str(value):
            raise InvalidArgument("Horizon has no catalogs: the catalog can only be ''")
        return ""
    if name == SCHEMA:
        if str(value).lower() != DB_SCHEMA:
            raise InvalidArgument(f"Horizon's tables are all in schema {DB_SCHEMA!r}")
        return DB_SCHEMA
    raise NotFound(f"unknown session option {name!r}: Horizon knows {', '.join(sorted(_KNOWN))}")


_KNOWN = (MIN_SNAPSHOT, MAX_STALENESS, PIN_ID, BYPASS_CACHE, CATALOG, SCHEMA)


def read_options(session: Mapping[str, Any], header: Callable[[str], str | None]) -> ReadOptions:
    """The read controls of one call: its headers over its session's options."""
    values = dict(session)
    for name, header_name in HEADERS.items():
        text = header(header_name)
        if text is not None:
            values[name] = checked_option(name, text)
    return ReadOptions.parse(
        min_snapshot=values.get(MIN_SNAPSHOT, ""),
        max_staleness_s=float(values.get(MAX_STALENESS, 0.0)),
        pin_id=values.get(PIN_ID, ""),
        bypass_cache=bool(values.get(BYPASS_CACHE, False)),
    )


def query_id(requested: str | None) -> str:
    """The query's id: the caller's (checked like ExecuteQuery's) or a fresh one."""
    if not requested:
        return secrets.token_hex(8)
    if len(requested) > 64 or not set(requested) <= _QUERY_ID_CHARS:
        raise InvalidArgument(
            f"{QUERY_ID_HEADER} must be at most 64 letters, digits, '-', '_' or '.'"
        )
    return requested


def option_value(message: fa.SessionOptionValue) -> Any:
    """A ``SessionOptionValue`` as Python (None: no value, which erases the option)."""
    kind = message.WhichOneof("option_value")
    if kind is None:
        return None
    if kind == "string_list_value":
        return list(message.string_list_value.values)
    return getattr(message, kind)


def option_message(value: Any) -> fa.SessionOptionValue:
    if isinstance(value, bool):
        return fa.SessionOptionValue(bool_value=value)
    if isinstance(value, int):
        return fa.SessionOptionValue(int64_value=value)
    if isinstance(value, float):
        return fa.SessionOptionValue(double_value=value)
    if isinstance(value, list):
        return fa.SessionOptionValue(
            string_list_value=fa.SessionOptionValue.StringListValue(values=value)
        )
    return fa.SessionOptionValue(string_value=str(value))


def apply_options(
    options: dict[str, Any], request: fa.SetSessionOptionsRequest
) -> fa.SetSessionOptionsResult:
    """Set (or, valueless, erase) each requested option; the result names those refused."""
    result = fa.SetSessionOptionsResult()
    for name, message in request.session_options.items():
        value = option_value(message)
        if value is None:
            options.pop(name, None)
            continue
        if isinstance(value, list):
            result.errors[name].value = Error.INVALID_VALUE
            continue
        try:
            options[name] = checked_option(name, value)
        except NotFound:
            result.errors[name].value = Error.INVALID_NAME
        except HorizonError:
            result.errors[name].value = Error.INVALID_VALUE
    return result


def session_id(cookie_headers: list[Any]) -> str | None:
    """The session id in the call's ``cookie`` headers, if any."""
    for header in cookie_headers:
        text = header.decode("ascii", "replace") if isinstance(header, bytes) else str(header)
        for part in text.split(";"):
            name, _, value = part.strip().partition("=")
            if name == SESSION_COOKIE and value:
                return value.strip()
    return None


@dataclass
class Session:
    id: str
    owner: str
    options: dict[str, Any] = field(default_factory=dict)
    touched: float = 0.0


class SessionStore:
    """Sessions by id, each usable only by the principal that made it; idle ones expire."""

    def __init__(
        self,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        quota: Quota | None = None,
    ) -> None:
        """``quota``: live sessions on the broker and per identity (a client that never sends
        its cookie back makes one per call)."""
        self.ttl_s = ttl_s
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._owners = OwnerCounts(quota or session_quota())
        self._lock = threading.Lock()

    def create(self, owner: str) -> Session:
        session = Session(secrets.token_urlsafe(18), owner, touched=self._clock())
        with self._lock:
            self._owners.add(owner)
            self._sessions[session.id] = session
        return session

    def find(self, id_: str | None, owner: str) -> Session | None:
        """The live session ``id_`` of ``owner`` (None without a cookie; NotFound when the
        cookie names no live session of this caller)."""
        if id_ is None:
            return None
        with self._lock:
            session = self._sessions.get(id_)
            if session is None or session.owner != owner:
                raise NotFound(
                    f"Flight SQL session {id_[:8]}... is unknown or expired (sessions unused for "
                    f"{self.ttl_s:g} s are closed): set the session options again"
                )
            session.touched = self._clock()
            return session

    def close(self, id_: str) -> bool:
        with self._lock:
            session = self._sessions.pop(id_, None)
            if session is not None:
                self._owners.remove(session.owner)
            return session is not None

    def expire(self) -> int:
        """Drop sessions idle past the TTL; how many."""
        limit = self._clock() - self.ttl_s
        with self._lock:
            idle = [key for key, session in self._sessions.items() if session.touched < limit]
            for key in idle:
                self._owners.remove(self._sessions.pop(key).owner)
        return len(idle)

    def __len__(self) -> int:
        return len(self._sessions)

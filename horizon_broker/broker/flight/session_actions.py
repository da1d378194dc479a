"""The Flight SQL session actions: SetSessionOptions, GetSessionOptions, CloseSession.

A session is named by the ``arrow_flight_session_id`` cookie and belongs to its caller; its
options are Horizon's read controls (:mod:`horizon_broker.broker.flight.sessions`), applied to every query the
caller sends with the cookie.
"""

from __future__ import annotations

from typing import Any

from horizon_broker._core.errors import NotFound
from horizon_broker.broker._proto.arrow.flight.protocol import flight_actions_pb2 as fa
from horizon_broker.broker.flight import commands
from horizon_broker.broker.flight.auth import call_headers
from horizon_broker.broker.flight.sessions import (
    CATALOG,
    DB_SCHEMA,
    SCHEMA,
    SESSION_COOKIE,
    Session,
    SessionStore,
    apply_options,
    option_message,
    session_id,
)
from horizon_broker.broker.grants import Principal


def caller_session(sessions: SessionStore, context: Any, principal: Principal) -> Session | None:
    """The session the call's cookie names (None without one)."""
    cookies = call_headers(context).headers.get("cookie", [])
    return sessions.find(session_id(cookies), principal.name)


def set_options(
    sessions: SessionStore, context: Any, principal: Principal, body: bytes
) -> list[bytes]:
    request = commands.parse_raw(body, fa.SetSessionOptionsRequest, "SetSessionOptions body")
    try:
        session = caller_session(sessions, context, principal)
    except NotFound:
        session = None  # an expired session: setting options starts a new one
    if session is None:
        session = sessions.create(principal.name)
        context.add_header("set-cookie", f"{SESSION_COOKIE}={session.id}")
    return [apply_options(session.options, request).SerializeToString()]


def get_options(
    sessions: SessionStore, context: Any, principal: Principal, body: bytes
) -> list[bytes]:
    commands.parse_raw(body, fa.GetSessionOptionsRequest, "GetSessionOptions body")
    session = caller_session(sessions, context, principal)
    options = {CATALOG: "", SCHEMA: DB_SCHEMA, **(session.options if session else {})}
    result = fa.GetSessionOptionsResult()
    for name, value in options.items():
        result.session_options[name].CopyFrom(option_message(value))
    return [result.SerializeToString()]


def close(sessions: SessionStore, context: Any, principal: Principal, body: bytes) -> list[bytes]:
    commands.parse_raw(body, fa.CloseSessionRequest, "CloseSession body")
    session = caller_session(sessions, context, principal)
    if session is None:
        raise NotFound("this call names no session (no arrow_flight_session_id cookie)")
    sessions.close(session.id)
    return [fa.CloseSessionResult(status=fa.CloseSessionResult.CLOSED).SerializeToString()]

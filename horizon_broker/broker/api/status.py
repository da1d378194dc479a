"""The one mapping between Horizon's error hierarchy and gRPC status codes.

Every layer raises :class:`horizon_broker._core.errors.HorizonError` subclasses carrying a transport-neutral
code. This module is the only place that turns them into gRPC statuses (server side) and back into
typed errors (client side). Anything that is not a HorizonError becomes INTERNAL with a generic
message and a reference id; the stack trace goes to the broker's log, never to the client.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from horizon_broker._core.errors import (
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    HorizonError,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    StatusCode,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from horizon_broker.broker.observe import metrics

log = logging.getLogger("horizon.broker")

GRPC_STATUS: dict[StatusCode, grpc.StatusCode] = {
    StatusCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    StatusCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    StatusCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    StatusCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    StatusCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    StatusCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    StatusCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    StatusCode.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    StatusCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    StatusCode.CANCELLED: grpc.StatusCode.CANCELLED,
    StatusCode.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    StatusCode.INTERNAL: grpc.StatusCode.INTERNAL,
}
"""Horizon status code -> gRPC status code (names match one to one)."""

ERROR_TYPES: dict[grpc.StatusCode, type[HorizonError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: Internal,
}
"""gRPC status code -> the Horizon error class a client raises for it."""


def grpc_status(error: HorizonError) -> grpc.StatusCode:
    """The gRPC status code for a Horizon error."""
    return GRPC_STATUS.get(error.code, grpc.StatusCode.INTERNAL)


def status_of(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The (code, human message) a client should see for ``error``.

    Unexpected errors are logged with their stack trace under a reference id, and the client gets
    only the id: internal details never leave the broker.
    """
    if isinstance(error, HorizonError):
        return grpc_status(error), str(error) or type(error).__name__
    reference = uuid.uuid4().hex[:12]
    log.error("internal error (ref %s)", reference, exc_info=error)
    return grpc.StatusCode.INTERNAL, f"internal error in the broker (ref {reference})"


def ended_as(error: BaseException) -> tuple[str, str, str, str]:
    """How the query registry records a query that ended with ``error``: its final state, the
    status code's name, the message and the engine's error condition ("" if none). Logs
    nothing (the answer's own :func:`status_of` logs an internal error once, under the
    reference the client sees)."""
    if isinstance(error, HorizonError):
        code = grpc_status(error)
        message = str(error) or type(error).__name__
        condition = error.condition
    else:
        code, message, condition = grpc.StatusCode.INTERNAL, "internal error in the broker", ""
    state = _ENDED_STATES.get(code, "failed")
    return state, code.name, message, condition


_ENDED_STATES = {
    grpc.StatusCode.CANCELLED: "cancelled",
    grpc.StatusCode.DEADLINE_EXCEEDED: "deadline",
}


HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 412,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
}
"""gRPC status code -> the HTTP status the web console answers with (anything else: 500)."""


def http_status_of(error: BaseException) -> tuple[int, str, str]:
    """The web console's (HTTP status, gRPC code name, message) for ``error``."""
    code, message = status_of(error)
    return HTTP_STATUS.get(code, 500), code.name, message


def error_from_rpc(error: grpc.RpcError) -> HorizonError:
    """Client side: the typed Horizon error for a failed call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    cls = ERROR_TYPES.get(code, Internal)
    return cls(details or code.name)


_F = TypeVar("_F", bound=Callable[..., Any])


def unary_errors(method: _F) -> _F:
    """Decorate an async unary servicer method: HorizonErrors become their status, the rest
    INTERNAL (a client's cancellation propagates as it is); every call is counted by method
    and code (:mod:`horizon_broker.broker.observe.metrics`)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        started, code = time.perf_counter(), "CANCELLED"  # unless it ends otherwise
        try:
            result = await method(self, request, context)
            code = "OK"
            return result
        except Exception as error:
            if isinstance(error, grpc.aio.AbortError):
                code = getattr(context.code(), "name", "UNKNOWN")
                raise
            status, message = status_of(error)
            code = status.name
            await context.abort(status, message)
            return None
        finally:
            metrics.count_call(method.__name__, code, time.perf_counter() - started)

    return wrapper  # type: ignore[return-value]


def stream_errors(method: _F) -> _F:
    """Decorate an async streaming servicer method (one that writes with ``context.write``)
    the same way as :func:`unary_errors`."""
    return unary_errors(method)

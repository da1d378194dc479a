"""Horizon errors as Flight errors.

The status code and message come from the one mapping, :func:`horizon_broker.broker.api.status.status_of`; this
module only picks the exception type through which ``pyarrow.flight`` sends that gRPC code:

* UNAUTHENTICATED, PERMISSION_DENIED, UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED and INTERNAL are
  Flight's own error types; INVALID_ARGUMENT, NOT_FOUND and UNIMPLEMENTED are Arrow's (pyarrow maps
  ``ArrowInvalid``, ``ArrowKeyError`` and ``ArrowNotImplementedError`` to them).
* pyarrow's server cannot send FAILED_PRECONDITION or RESOURCE_EXHAUSTED (Arrow's transport status
  has no such codes). FAILED_PRECONDITION goes out as INVALID_ARGUMENT (not retryable as sent, as
  Arrow's own client reads a FAILED_PRECONDITION) and RESOURCE_EXHAUSTED as UNAVAILABLE (retry
  later, as Arrow's transport reads it).

Every error also carries the exact Horizon status, for clients that read more than the code: the
``x-horizon-status`` trailer (ADBC lists trailers in an error's details). Errors sent through
Flight's own types also carry gRPC's rich status (``grpc-status-details-bin``: a
``google.rpc.Status`` with the clean message and an ``ErrorInfo`` whose reason is the status;
gRPC-Go, and so the ADBC driver, shows that message).

pyarrow appends a Python exception's formatted traceback to the message it sends; the broker's
stack traces stay in its log, so the traceback of these error types is formatted as the status
name alone (:func:`install_quiet_tracebacks`).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.flight as fl
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from horizon_broker.broker.api.status import status_of

STATUS_TRAILER = "x-horizon-status"
ERROR_DOMAIN = "horizon.broker"


class _QuietTraceback:
    """Marks an error whose formatted traceback is only its status name."""

    status: str = ""


class InvalidArgumentError(_QuietTraceback, pa.ArrowInvalid):
    """INVALID_ARGUMENT (and FAILED_PRECONDITION) through pyarrow.flight."""


class NotFoundError(_QuietTraceback, pa.ArrowKeyError):
    """NOT_FOUND through pyarrow.flight."""


class UnimplementedError(_QuietTraceback, pa.ArrowNotImplementedError):
    """UNIMPLEMENTED through pyarrow.flight."""


_FLIGHT_TYPES: dict[grpc.StatusCode, type[fl.FlightError]] = {
    grpc.StatusCode.UNAUTHENTICATED: fl.FlightUnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: fl.FlightUnauthorizedError,
    grpc.StatusCode.UNAVAILABLE: fl.FlightUnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: fl.FlightUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: fl.FlightTimedOutError,
    grpc.StatusCode.CANCELLED: fl.FlightCancelledError,
    grpc.StatusCode.INTERNAL: fl.FlightInternalError,
}
_ARROW_TYPES: dict[grpc.StatusCode, type[_QuietTraceback]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: InvalidArgumentError,
    grpc.StatusCode.ALREADY_EXISTS: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}
_SENT_AS: dict[type, grpc.StatusCode] = {
    fl.FlightUnauthenticatedError: grpc.StatusCode.UNAUTHENTICATED,
    fl.FlightUnauthorizedError: grpc.StatusCode.PERMISSION_DENIED,
    fl.FlightUnavailableError: grpc.StatusCode.UNAVAILABLE,
    fl.FlightTimedOutError: grpc.StatusCode.DEADLINE_EXCEEDED,
    fl.FlightCancelledError: grpc.StatusCode.CANCELLED,
    fl.FlightInternalError: grpc.StatusCode.INTERNAL,
    InvalidArgumentError: grpc.StatusCode.INVALID_ARGUMENT,
    NotFoundError: grpc.StatusCode.NOT_FOUND,
    UnimplementedError: grpc.StatusCode.UNIMPLEMENTED,
}
"""The gRPC code each exception type reaches the client with."""


def sent_code(code: grpc.StatusCode) -> grpc.StatusCode:
    """The gRPC code a Horizon status reaches Flight clients with."""
    if code in _FLIGHT_TYPES:
        return _SENT_AS[_FLIGHT_TYPES[code]]
    return _SENT_AS[_ARROW_TYPES.get(code, InvalidArgumentError)]  # type: ignore[index]


def rich_status(code: grpc.StatusCode, message: str) -> bytes:
    """gRPC's rich error status: the code sent, the clean message, the Horizon status."""
    info = error_details_pb2.ErrorInfo(
        reason=code.name, domain=ERROR_DOMAIN, metadata={"status": code.name}
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=sent_code(code).value[0], message=message, details=[detail])
    return status.SerializeToString()


def flight_error(error: BaseException, context: Any = None) -> Exception:
    """The exception to raise from a Flight handler for ``error`` (any exception: unexpected ones
    are INTERNAL with a reference id, logged by :func:`horizon_broker.broker.api.status.status_of`). With the call's
    ``context``, the exact status also goes into the trailers."""
    if isinstance(error, (fl.FlightError, _QuietTraceback)):
        return error  # already translated (a nested handler)
    code, message = status_of(error)
    details = rich_status(code, message)
    if context is not None:
        context.add_trailer(STATUS_TRAILER, code.name)
    flight_type = _FLIGHT_TYPES.get(code)
    if flight_type is not None:
        return flight_type(message, details)
    # No rich status for these: Arrow's C++ client reads one as a FlightStatusDetail and then
    # reports an INVALID_ARGUMENT as an internal error; the code and the trailer say it all.
    arrow_type = _ARROW_TYPES.get(code, InvalidArgumentError)
    translated = arrow_type(message)  # type: ignore[operator]
    translated.status = code.name
    return translated


_install_lock = threading.Lock()
_original_format_exception: Callable[..., list[str]] | None = None


def install_quiet_tracebacks() -> None:
    """Make :func:`traceback.format_exception` render the error types above as their status name.

    pyarrow.flight formats a handler's Python exception with ``traceback.format_exception`` and
    sends the text to the client; for these types that would be the broker's stack. Every other
    exception is formatted as before (the broker's log keeps full traces). Idempotent.
    """
    global _original_format_exception
    with _install_lock:
        if _original_format_exception is not None:
            return
        original = traceback.format_exception
        _original_format_exception = original

        def format_exception(exc: Any, /, *args: Any, **kwargs: Any) -> list[str]:
            value = args[0] if args else kwargs.get("value", exc)
            if isinstance(value, _QuietTraceback) or (
                value is None and isinstance(exc, _QuietTraceback)
            ):
                shown = value if isinstance(value, _QuietTraceback) else exc
                return [f"Horizon status {shown.status or 'INVALID_ARGUMENT'}"]
            return original(exc, *args, **kwargs)

        format_exception.__wrapped__ = original  # type: ignore[attr-defined]
        traceback.format_exception = format_exception

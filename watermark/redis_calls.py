"""What every Redis client of the state store shares: which errors are worth a retry, the retry
loop itself, and turning a script's reply into plain Python values."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from timeline.errors import Unavailable

TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)
"""Errors that a restarted or briefly unreachable Redis raises: retried, then UNAVAILABLE."""

_T = TypeVar("_T")


def retrying(operation: Callable[[], _T], timeout_s: float, unreachable: str) -> _T:
    """Run ``operation``, retrying transient errors with backoff for ``timeout_s``; then raise
    UNAVAILABLE as ``"<unreachable>: <error>"``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        try:
            return operation()
        except TRANSIENT as error:
            if time.monotonic() + delay > deadline:
                raise Unavailable(f"{unreachable}: {error}") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def decode_reply(value: Any) -> Any:
    """A reply with every bytes value decoded as UTF-8 (lists and maps too)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [decode_reply(item) for item in value]
    if isinstance(value, dict):
        return {decode_reply(k): decode_reply(v) for k, v in value.items()}
    return value

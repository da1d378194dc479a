"""What every Redis client of the state store shares: the connection (no hidden retries), which
errors are worth a retry, the retry loop itself, and turning a script's reply into plain Python
values."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from horizon_broker._core.errors import Unavailable
from horizon_broker._core.redis_sentinel import call_acknowledged, open_store
from horizon_broker._core.store_address import parse_store_url

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


def connect(url: str, *, socket_timeout: float | None = 5.0, strict: bool = False) -> redis.Redis:
    """A client without redis-py's hidden retries: our callers retry and notice restarts. The
    URL may name a Sentinel group (:mod:`horizon_broker._core.store_address`); ``strict``: see
    :mod:`horizon_broker._core.redis_sentinel`."""
    return open_store(parse_store_url(url), socket_timeout=socket_timeout, strict=strict)


class ScriptClient:
    """Atomic scripts of one service run against one Redis key space (a prefix), with the
    retries above: what the lock service and the pin store share. Every script takes the prefix
    as its first argument."""

    def __init__(
        self,
        redis_: str | redis.Redis,
        scripts: dict[str, str],
        *,
        prefix: str,
        retry_timeout_s: float,
        unreachable: str,
        acknowledged: frozenset[str] = frozenset(),
    ) -> None:
        """``redis_`` is a URL (the client opens and closes its connection) or a connection
        the caller owns; ``unreachable`` names the service in UNAVAILABLE errors; the scripts
        named in ``acknowledged`` wait for the URL's ``wait_replicas`` (rule F2 of
        ``docs/design/contract/failover.md``)."""
        self.owns_connection = isinstance(redis_, str)
        self.redis = connect(redis_) if isinstance(redis_, str) else redis_
        self.prefix = prefix
        self.retry_timeout_s = retry_timeout_s
        self.unreachable = unreachable
        self._scripts = {name: self.redis.register_script(text) for name, text in scripts.items()}
        self._acknowledged = acknowledged

    def call(self, name: str, args: list[str]) -> Any:
        """Run script ``name`` with ``args`` after the prefix; the reply decoded."""
        script, full = self._scripts[name], [self.prefix, *args]
        if name in self._acknowledged:
            return self.retrying(lambda: call_acknowledged(self.redis, script, full, name.lower()))
        return self.retrying(lambda: script(args=full))

    def retrying(self, operation: Callable[[], Any]) -> Any:
        """Any read of the same store, retried like the scripts; the reply decoded."""
        return retrying(lambda: decode_reply(operation()), self.retry_timeout_s, self.unreachable)

    def close(self) -> None:
        if self.owns_connection:
            self.redis.close()

"""Guessing tokens through the console, slowed down: failed sign-ins per client address.

A client address (an IPv6 address by its /64, which one machine usually holds whole) that
failed ``per_minute`` times within the last minute is refused (429, ``Retry-After``) until the
oldest of those failures is a minute old, before its token is even compared. A success forgets
the address. At most ``max_addresses`` addresses are remembered (the least recently failed is
forgotten first), so a flood of addresses costs bounded memory; an attacker holding that many
addresses gets that many guesses a minute anyway.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from horizon_broker._core.errors import ResourceExhausted
from horizon_broker._core.lru import Lru

WINDOW_S = 60.0
MAX_ADDRESSES = 10_000


class TooManySignIns(ResourceExhausted):
    """A client failed to sign in too often; ``retry_after_s`` says when it may try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def client_key(address: str) -> str:
    """The address failures are counted by: an IPv6 address's /64, any other as it is."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


class SignInLimit:
    """Failed sign-ins per client address within a sliding minute."""

    def __init__(
        self,
        per_minute: int,
        *,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self.max_addresses = max_addresses
        self._clock = clock
        self._failures: Lru[str, deque[float]] = Lru(max_addresses)
        """By the address's last failure: the least recently failing dropped first."""
        self._lock = threading.Lock()

    def check(self, address: str) -> None:
        """Raise :class:`TooManySignIns` while ``address`` is over the limit."""
        key = client_key(address)
        now = self._clock()
        with self._lock:
            failures = self._failures.peek(key)
            if failures is None or len(failures) < self.per_minute:
                return
            wait_s = failures[0] + WINDOW_S - now
        if wait_s > 0:
            retry = max(1, math.ceil(wait_s))
            raise TooManySignIns(
                f"too many failed sign-ins from {address}: at most {self.per_minute} a minute "
                f"([console] login_failures_per_minute); try again in {retry} s",
                retry,
            )

    def failed(self, address: str) -> None:
        key = client_key(address)
        now = self._clock()
        with self._lock:
            failures = self._failures.peek(key) or deque(maxlen=self.per_minute)
            failures.append(now)
            self._failures.put(key, failures)  # now the most recently failed

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.discard(client_key(address))

    def __len__(self) -> int:
        with self._lock:
            return len(self._failures)

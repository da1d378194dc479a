"""What live pins hold back (pure: no Redis, no clock; ``now_ms`` is passed in)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pin:
    """One pin as stored: the same snapshot of every table in ``tables``."""

    pin_id: str
    tables: tuple[str, ...]
    snapshot: int
    created_ms: int
    expires_ms: int
    owner: str = ""

    def live(self, now_ms: int) -> bool:
        return self.expires_ms > now_ms

    def lease_left_s(self, now_ms: int) -> float:
        return max(0.0, (self.expires_ms - now_ms) / 1000)


def live_pins(pins: Iterable[Pin], table: str, now_ms: int) -> list[Pin]:
    """The pins of ``table`` whose lease has not run out, oldest snapshot first."""
    found = [pin for pin in pins if table in pin.tables and pin.live(now_ms)]
    return sorted(found, key=lambda pin: (pin.snapshot, pin.pin_id))


def oldest_pinned(pins: Iterable[Pin], table: str, now_ms: int) -> int | None:
    """The lowest snapshot a live pin holds on ``table`` (None: nothing pinned)."""
    live = live_pins(pins, table, now_ms)
    return live[0].snapshot if live else None


def capped_horizon(wanted: int, previous: int, oldest_pin: int | None) -> int:
    """The retention horizon to store: ``wanted`` but never past a pinned snapshot, and never
    below ``previous`` (a horizon only moves up; a pin is refused below the horizon, so the two
    never cross).

    >>> capped_horizon(500, 100, 300)
    300
    >>> capped_horizon(500, 100, None)
    500
    """
    if oldest_pin is not None:
        wanted = min(wanted, oldest_pin)
    return max(previous, wanted)


def holds_release(
    pins: Iterable[Pin], table: str, released_ms: int, grace_ms: int, now_ms: int
) -> bool:
    """Whether a live pin may know files released (replaced) at ``released_ms``.

    A pin taken before the release, or within the grace period after it (a broker's view can
    trail Redis by that much), may have been handed those files by a passthrough plan, or may
    read them through the broker at its snapshot: they stay until the pin is released or expires.
    """
    return any(pin.created_ms <= released_ms + grace_ms for pin in live_pins(pins, table, now_ms))

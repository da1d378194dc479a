"""Waiting in tests for something the system does on its own thread: a liveness wait that fails
naming what never happened, never a bound on how long it took (timings belong in bench/)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

PATIENCE_S = 60.0
"""Long enough that a loaded machine never trips it; a hang still ends the test."""


def eventually(
    condition: Callable[[], _T | None], what: str, *, patience_s: float = PATIENCE_S
) -> _T:
    """``condition()``'s first truthy value, polled until it comes; AssertionError naming
    ``what`` if it never does."""
    give_up = time.monotonic() + patience_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > give_up:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)
